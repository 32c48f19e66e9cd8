from ..reproduce import main

main("planted")
