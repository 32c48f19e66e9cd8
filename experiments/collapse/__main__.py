from ..reproduce import main

main("collapse")
