"""Strip outputs and execution counts from notebooks (they are committed clean; outputs/ holds executed copies)."""
import json
import sys

for path in sys.argv[1:]:
    with open(path) as f:
        nb = json.load(f)
    nb.get("metadata", {}).pop("widgets", None)   # an executed copy's widget state (tqdm bars): output too
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
        cell.get("metadata", {}).pop("execution", None)
    with open(path, "w") as f:
        json.dump(nb, f, indent=1, ensure_ascii=False)
        f.write("\n")
