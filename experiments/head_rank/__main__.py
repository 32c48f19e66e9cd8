from ..reproduce import main

main("head_rank")
