from donto_pg.cli import main

main()
