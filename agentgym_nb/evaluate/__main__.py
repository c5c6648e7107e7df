"""python -m agentgym_nb.evaluate --env babyai --model outputs/runs/<name> --n 16 --k 1,2,4,8,16 (see cli.py)."""
from .cli import main

if __name__ == "__main__":   # a spawned worker process re-imports this module under another name
    main()
