from sun_lightning.cli import main

if __name__ == "__main__":
    main()
