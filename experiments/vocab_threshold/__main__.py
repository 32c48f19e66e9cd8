from ..reproduce import main

main("vocab_threshold")
