import sys
from pathlib import Path

# Tests import their helper module (eval_helpers) by name; importlib mode does not add this dir itself.
sys.path.insert(0, str(Path(__file__).parent))
