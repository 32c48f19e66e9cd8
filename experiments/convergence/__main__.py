from ..reproduce import main

main("convergence")
