"""Builds cartlab with its gRPC stubs generated from the checkout's proto/ (grpcio-tools).

The stubs go into cartlab/_proto/ of the build, never into the source tree: proto/ is the one
source of the wire format. CARTLAB_PROTO_DIR names another proto/ folder (a copy of the
checkout's)."""

import glob
import os
import re

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


def proto_dir():
    found = os.environ.get("CARTLAB_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
    if not glob.glob(os.path.join(found, "cart", "v1", "*.proto")):
        raise SystemExit(
            f"cartlab: no cart/v1/*.proto under {found}: build from a CART Lab checkout "
            "(pip install ./clients/python) or set CARTLAB_PROTO_DIR")
    return os.path.abspath(found)


def generate(out):
    from grpc_tools import protoc  # a build requirement (pyproject.toml)

    root = proto_dir()
    os.makedirs(out, exist_ok=True)
    protos = sorted(glob.glob(os.path.join(root, "cart", "v1", "*.proto")))
    include = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    args = ["protoc", f"-I{root}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}"]
    if protoc.main(args + protos) != 0:
        raise SystemExit("cartlab: protoc failed on " + " ".join(protos))
    # The stubs import each other as `cart.v1.…`; inside cartlab they are `cartlab._proto.cart.v1`.
    for path in glob.glob(os.path.join(out, "cart", "v1", "*.py")):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"^from cart\.v1 import", "from cartlab._proto.cart.v1 import", text, flags=re.M)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    for package in (out, os.path.join(out, "cart"), os.path.join(out, "cart", "v1")):
        open(os.path.join(package, "__init__.py"), "a").close()


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        generate(os.path.join(self.build_lib, "cartlab", "_proto"))


setup(cmdclass={"build_py": BuildWithStubs})
