"""The layering: `import sim` (every module of it) leaves torch, the reference and the upper floors out."""

import subprocess
import sys

UPPER = ("torch", "reference", "calibrate", "studies", "moesim")


def test_every_sim_module_imports_without_torch_or_upper_floors() -> None:
    code = (
        "import sys, pkgutil, importlib, sim;"
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(sim.__path__, 'sim.')"
        " if not m.name.endswith('__main__')];"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {UPPER!r});"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_sim_holds_no_command_line() -> None:
    import importlib.util

    assert importlib.util.find_spec("sim.cli") is None
    assert importlib.util.find_spec("sim.__main__") is None


def test_the_hardware_cost_model_does_not_import_the_stack_profiles() -> None:
    """sim.costs reads a framework's share through its KernelRates interface (issue 27 item 5)."""
    code = "import sys, sim.costs; print('sim.stacks' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_studies_and_calibrate_use_the_public_prediction_api() -> None:
    """studies/ and calibrate/ reach the engine through sim.predict's public names, never its submodules
    (issue 27 item 5): an import of sim.predict.<module> anywhere in them fails here with its file and line."""
    import ast
    import pathlib

    import sim.predict

    root = pathlib.Path(__file__).resolve().parents[1]
    bad = []
    for path in sorted([*root.joinpath("studies").rglob("*.py"), *root.joinpath("calibrate").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
                if node.module == "sim.predict":
                    bad += [f"{path.name}:{node.lineno} {a.name}" for a in node.names
                            if a.name not in sim.predict.__all__]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            bad += [f"{path.name}:{node.lineno} {n}" for n in names if n.startswith("sim.predict.")]
    assert bad == []
