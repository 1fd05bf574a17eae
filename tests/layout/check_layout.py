#!/usr/bin/env python3
"""The build enforces the parts' arrows: a forbidden include is not found.

For every part, one of its real source files is taken from compile_commands.json, its source
swapped for a probe that includes one public header of each part, and the command run as a
preprocessor (-E: an arrow is a question of which headers are found; the real build compiles
them). A header of a part that this part may use (the allowed arrows of docs/design.md,
followed through PUBLIC links) must be found with everything it includes; any other must fail
with "No such file". Both directions are checked, so the test fails if the staging of headers
breaks (nothing is found) as well as if it leaks (everything is). Preprocessing the 63 probes
takes about 5 s where compiling them (-fsyntax-only) took 45 s of CI.

A textual check adds what include paths cannot show (Highway sits in /usr/include, visible to
everyone): only the engine, and the CLI's FMA-peak probe, include <hwy/...>.

    check_layout.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile

# One public header per part, and a real source file compiled with the part's flags.
HEADERS = {
    "core": "jomoim/core/tensor.hpp",
    "engine": "jomoim/engine/attention.hpp",
    "formats": "jomoim/formats/npy.hpp",
    "text": "jomoim/text/tokenizer.hpp",
    "model": "jomoim/model/model.hpp",
    "explain": "jomoim/explain/explain.hpp",
    "serve": "serve/server.hpp",
}
SOURCES = {
    "core": "src/core/notation.cpp",
    "engine": "src/engine/validate.cpp",
    "formats": "src/formats/npy.cpp",
    "text": "src/text/bpe.cpp",
    "model": "src/model/config.cpp",
    "explain": "src/explain/explain.cpp",
    "serve": "apps/serve/request.cpp",
    "cli": "apps/jomoim/main.cpp",
    "python": "python/src/module.cpp",
}
# What each part may include: itself and what it reaches by the allowed arrows.
BELOW = {"core": set(), "engine": {"core"}, "formats": {"core"}, "text": {"core"},
         "model": {"engine", "formats", "text"}, "explain": {"model"}, "serve": {"explain"},
         "cli": {"serve", "explain"}, "python": {"engine", "model", "explain"}}


def allowed(part):
    seen, todo = {part}, [part]
    while todo:
        for p in BELOW[todo.pop()]:
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def main():
    src, build = pathlib.Path(sys.argv[1]).resolve(), pathlib.Path(sys.argv[2]).resolve()
    db = json.loads((build / "compile_commands.json").read_text())
    commands = {str(pathlib.Path(e["file"]).resolve()): e for e in db}
    failures, checked = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for part, rel in SOURCES.items():
            entry = commands.get(str(src / rel))
            if entry is None:
                if part == "python":  # the module is optional (pybind11)
                    continue
                failures.append(f"{part}: {rel} is not in compile_commands.json")
                continue
            args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
            may = allowed(part)
            for other, header in HEADERS.items():
                probe = pathlib.Path(tmp) / f"probe_{part}_{other}.cpp"
                probe.write_text(f"#include <{header}>\nint jomoim_layout_probe;\n")
                cmd, skip = [], False
                for a in args:
                    if skip:
                        skip = False
                        continue
                    if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
                        skip = True
                        continue
                    if a in ("-MD", "-MMD") or pathlib.Path(a).name == pathlib.Path(rel).name:
                        continue
                    cmd.append(a)
                cmd += ["-E", "-o", os.devnull, str(probe)]
                r = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
                checked += 1
                want_ok = other in may
                if want_ok and r.returncode != 0:
                    failures.append(f"{part} may include <{header}> but it does not preprocess:\n"
                                    + r.stderr.strip()[-800:])
                elif not want_ok and r.returncode == 0:
                    failures.append(f"{part} must not see <{header}> ({other}), but it is found")
                elif not want_ok and "No such file" not in r.stderr:
                    failures.append(f"{part} <{header}> failed for another reason:\n{r.stderr.strip()[-800:]}")
    # Highway only in the engine (and the CLI's FMA-peak probe).
    hwy = re.compile(r'^\s*#\s*include\s*[<"]hwy/', re.M)
    for path in sorted(list(src.glob("src/**/*.[ch]pp")) + list(src.glob("apps/**/*.[ch]pp"))
                       + list(src.glob("python/src/*.cpp"))):
        relp = path.relative_to(src).as_posix()
        if relp.startswith("src/engine/") or relp == "apps/jomoim/fma_peak.cpp":
            continue
        if hwy.search(path.read_text(errors="replace")):
            failures.append(f"{relp} includes Highway; SIMD code belongs in src/engine")
    for f in failures:
        print("FAIL:", f)
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
