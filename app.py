"""`python app.py`: the entry point Hugging Face Spaces runs; everything else lives in playground.cli."""

from playground.cli import main

if __name__ == "__main__":
    main()
