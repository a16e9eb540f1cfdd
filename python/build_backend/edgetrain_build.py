"""PEP 517 build backend: builds the `edgetrain` wheel with the project's own CMake build, so that
`pip install .` needs nothing from a package index (pyproject.toml requires nothing to build).

The wheel is built in <repo>/build-python, configured here for the Python that runs pip. With the config
setting `build-dir` (`pip install --config-settings build-dir=DIR .`) or EDGETRAIN_CMAKE_BUILD_DIR, an
existing CMake build folder is used as it is: its edgetrain_python target is brought up to date and packed.
"""

import base64
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _version():
    cmake = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(edgetrain\s+VERSION\s+([0-9.]+)", cmake).group(1)


def _project():
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]


def _dist_info_name():
    return f"edgetrain-{_version()}.dist-info"


def _tag():
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{python}-{python}{sys.abiflags}-{platform}"


def _metadata():
    project = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {_version()}",
             f"Summary: {project['description']}", f"Requires-Python: {project['requires-python']}"]
    lines += [f"Requires-Dist: {requirement}" for requirement in project.get("dependencies", [])]
    for extra, requirements in project.get("optional-dependencies", {}).items():
        lines += [f"Provides-Extra: {extra}"] + [f'Requires-Dist: {r}; extra == "{extra}"' for r in requirements]
    return "\n".join(lines) + "\n"


def _wheel_file():
    return f"Wheel-Version: 1.0\nGenerator: edgetrain_build\nRoot-Is-Purelib: false\nTag: {_tag()}\n"


def _cached_python(build_dir):
    cache = (build_dir / "CMakeCache.txt").read_text()
    match = re.search(r"^Python_EXECUTABLE:\w+=(.*)$", cache, re.MULTILINE)
    return match.group(1) if match else None


def _build_package(config_settings):
    """Builds the module and returns the folder holding the `edgetrain` package."""
    given = (config_settings or {}).get("build-dir") or os.environ.get("EDGETRAIN_CMAKE_BUILD_DIR")
    build_dir = pathlib.Path(given).resolve() if given else ROOT / "build-python"
    if not given or not (build_dir / "CMakeCache.txt").exists():
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), *generator, "-DCMAKE_BUILD_TYPE=Release",
                        "-DEDGETRAIN_BUILD_TESTS=OFF", "-DEDGETRAIN_BUILD_EXAMPLES=OFF", "-DEDGETRAIN_BUILD_BENCH=OFF",
                        "-DEDGETRAIN_BUILD_PYTHON=ON", f"-DPython_EXECUTABLE={sys.executable}"], check=True)
    built_for = _cached_python(build_dir)
    if not built_for or os.path.realpath(built_for) != os.path.realpath(sys.executable):
        raise RuntimeError(f"the CMake build in {build_dir} is for Python {built_for}, not {sys.executable}")
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    subprocess.run(["cmake", "--build", str(build_dir), "--target", "edgetrain_python", "--parallel", jobs],
                   check=True)
    return build_dir / "python"


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    dist_info = pathlib.Path(metadata_directory) / _dist_info_name()
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / "METADATA").write_text(_metadata())
    (dist_info / "WHEEL").write_text(_wheel_file())
    return dist_info.name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    package_root = _build_package(config_settings)
    files = {}
    for path in sorted((package_root / "edgetrain").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[path.relative_to(package_root).as_posix()] = path.read_bytes()
    dist_info = _dist_info_name()
    files[f"{dist_info}/METADATA"] = _metadata().encode()
    files[f"{dist_info}/WHEEL"] = _wheel_file().encode()
    record = [_record_line(name, data) for name, data in files.items()] + [f"{dist_info}/RECORD,,"]
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()

    wheel_name = f"edgetrain-{_version()}-{_tag()}.whl"
    with zipfile.ZipFile(pathlib.Path(wheel_directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
    return wheel_name
