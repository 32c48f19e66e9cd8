from ..reproduce import main

main("saturation")
