from ..reproduce import main

main("werror_loss")
