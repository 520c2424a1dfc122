"""The old name of :mod:`framework.registry.plugins`, where entry-point plugins are loaded.

Plugin loading belongs to the registries (it fills them, and their errors name failed plugins); it
moved into ``framework/registry/`` so that the two no longer import each other across packages. This
name stays importable for code written against it: it is the same module object, not a copy, so its
state (loaded and failed plugins) and anything patched on it are shared.
"""

import sys

from framework.registry import plugins

sys.modules[__name__] = plugins
