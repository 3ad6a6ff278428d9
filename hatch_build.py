"""Wheel build hook: the compiled-module manifest of a mypyc wheel.

With the mypyc hook enabled (``HATCH_BUILD_HOOK_ENABLE_MYPYC=true``), the
wheel carries the hot core modules compiled (hatch-mypyc) next to their
sources. ``streams._native`` calls a compiled module "stale" unless
``streams/core/native-build.json`` records its source's SHA-256, as
``scripts/build-native`` writes it for a checkout; this hook writes the same
manifest for the wheel, so ``fencewatch --version`` says "compiled". A pure
build (the default) gets no manifest and says "interpreted".
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from typing import Any

from hatchling.builders.config import BuilderConfig
from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class NativeManifestHook(BuildHookInterface[BuilderConfig]):
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or build_data.get("pure_python", True):
            return  # no compiled modules in this wheel: nothing to vouch for
        modules = self.build_config.target_config["hooks"]["mypyc"]["include"]
        manifest = {}
        for path in modules:
            with open(os.path.join(self.root, path), "rb") as source:
                manifest[path] = hashlib.sha256(source.read()).hexdigest()
        fd, self._manifest = tempfile.mkstemp(suffix=".json")
        with os.fdopen(fd, "w") as out:
            json.dump(manifest, out, indent=2, sort_keys=True)
        build_data["force_include"][self._manifest] = "streams/core/native-build.json"

    def finalize(self, version: str, build_data: dict[str, Any], artifact_path: str) -> None:
        manifest = getattr(self, "_manifest", None)
        if manifest is not None:  # in the wheel now
            os.unlink(manifest)
