import shutil, tempfile, pathlib, json
from dflashbench.report import load_model
from dflashbench.report.console import verdict_lines, wrap
d = pathlib.Path(tempfile.mkdtemp())
src = pathlib.Path("results/examples/demo-20261125-024540-6b40")
b = d / "demo-b"; shutil.copytree(src, b)
m = json.loads((b/"manifest.json").read_text()); m["run_id"]="demo-b"; (b/"manifest.json").write_text(json.dumps(m))
for f in ("points.jsonl","requests.jsonl"):
    (b/f).write_text((b/f).read_text().replace("demo-20261125-024540-6b40","demo-b"))
model = load_model([src, b], with_figures=False)
print("\n".join(wrap(verdict_lines(model), 100)))
