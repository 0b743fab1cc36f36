from dynaq.cli import main

main()
