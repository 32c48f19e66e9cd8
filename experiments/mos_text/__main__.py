from ..reproduce import main

main("mos_text")
