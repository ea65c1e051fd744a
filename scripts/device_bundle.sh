#!/usr/bin/env bash
# Everything a GPU machine without a package index and without Jupyter lacks to run the
# notebooks and the bench (docs/gpu-runs.md), in one folder to copy there:
#   kernel/  the Jupyter kernel's and nbval's wheels (installed there with pip --target)
#   wheels/  a d2lzh wheel and d2lzh's small dependencies: the package index the notebooks'
#            setup cell sees there (PIP_FIND_LINKS)
#   data/    the Fashion-MNIST files
# Usage: scripts/device_bundle.sh [FOLDER]   (default build/device; run `make data` first)
# DEVICE_PY: that machine's Python version (default 3.12).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/device}
py=${PY:-.venv/bin/python}
device_py=${DEVICE_PY:-3.12}
[ -x "$py" ] || { echo "error: $py not found: run make data first (it builds .venv)" >&2; exit 1; }
data=$("$py" -c 'import d2lzh.data as d; print(d.find_fashion_mnist(download=False))') ||
  { echo "error: Fashion-MNIST not found: run make data first" >&2; exit 1; }
platforms=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64)
download=("$py" -m pip download --quiet --disable-pip-version-check --only-binary :all:
          --python-version "$device_py" "${platforms[@]}")
if [ -n "$(ls -A "$out" 2>/dev/null)" ] && [ ! -d "$out/wheels" ]; then
  echo "error: $out is not empty and holds no earlier bundle: name a new folder" >&2; exit 1
fi
rm -rf "$out" && mkdir -p "$out/kernel" "$out/wheels" "$out/data"
"${download[@]}" -d "$out/kernel" $(grep -E '^(ipykernel|nbclient)==' requirements-cloud.txt) \
  $(grep -E '^(nbval|pytest|pytest-timeout)==' requirements.txt)   # make test-gpu's nbval
"${download[@]}" --no-deps -d "$out/wheels" tqdm psutil setuptools
# d2lzh's font package (pyproject.toml), 57 MB of which d2lzh uses one 5 MB font: the bundle
# carries the same wheel without its Noto Sans CJK files (its RECORD rewritten to match).
"${download[@]}" --no-deps -d "$out" "$(grep -E '^mpl-font==' requirements.txt)"
"$py" - "$out"/mpl_font-*.whl "$out/wheels" <<'EOF_PY'
import os, sys, zipfile
src, folder = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as whl, \
        zipfile.ZipFile(os.path.join(folder, os.path.basename(src)), 'w', zipfile.ZIP_DEFLATED) as out:
    for item in whl.infolist():
        data = whl.read(item)
        if item.filename.endswith('dist-info/RECORD'):
            data = b''.join(ln for ln in data.splitlines(True) if b'/fonts/noto/' not in ln)
        if '/fonts/noto/' not in item.filename:
            out.writestr(item, data)
os.remove(src)
EOF_PY
had_egg_info=$([ -e d2lzh.egg-info ] && echo 1 || true)
"$py" -m pip wheel --quiet --disable-pip-version-check --no-deps --no-build-isolation \
  -w "$out/wheels" .
rm -rf build/lib build/bdist.*          # setuptools' leftovers in this tree
[ -n "$had_egg_info" ] || rm -rf d2lzh.egg-info
cp "$data"/*.gz "$out/data/"
du -sh "$out"/*
