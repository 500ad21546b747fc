#!/usr/bin/env python3
"""Clang's thread-safety analysis over every source that uses absl::Mutex.

The project builds with GCC, which ignores ABSL_GUARDED_BY and friends; this script re-runs the
compile commands of those files (from BUILD/compile_commands.json) through `clang++
-fsyntax-only -Wthread-safety -Werror`, so that a member read or written without its mutex fails
here. Needs clang (deploy/install-deps.sh --fuzz installs it). Usage: run.py [BUILD_DIR]
"""
import json
import os
import shlex
import subprocess
import sys

build = sys.argv[1] if len(sys.argv) > 1 else "build"
root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
commands = json.load(open(os.path.join(build, "compile_commands.json")))
checked, failed = 0, 0
for entry in commands:
    source = entry["file"]
    if not source.startswith(root) or "/tests/" in source or "/build" in source:
        continue
    with open(source, errors="replace") as f:
        text = f.read()
    header = os.path.splitext(source)[0] + ".h"
    if os.path.exists(header):
        with open(header, errors="replace") as f:
            text += f.read()
    if "absl::Mutex" not in text:
        continue
    args, skip = [], False
    for a in shlex.split(entry["command"])[1:]:
        if skip:
            skip = False
        elif a in ("-o", "-include", "-Xclang"):  # output and GCC's precompiled header
            skip = True
        elif a != "-c" and a != source and not a.startswith("-Winvalid-pch"):
            args.append(a)
    r = subprocess.run(["clang++", "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
                        "-Wno-unknown-warning-option"] + args + [source],
                       cwd=entry["directory"], capture_output=True, text=True)
    checked += 1
    if r.returncode != 0:
        failed += 1
        print(f"FAIL {os.path.relpath(source, root)}\n{r.stderr}")
    else:
        print(f"ok   {os.path.relpath(source, root)}")
print(f"thread-safety: {checked} files checked, {failed} failed")
sys.exit(1 if failed or not checked else 0)
