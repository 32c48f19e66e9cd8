from ..reproduce import main

main("target_rank")
