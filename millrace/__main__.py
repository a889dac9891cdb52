import sys

from millrace.cli import main

if __name__ == "__main__":  # multiprocessing's forkserver/spawn re-import the main module
    sys.exit(main())
