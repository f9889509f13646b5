from dsa_kvcalc.cli import main

main()
