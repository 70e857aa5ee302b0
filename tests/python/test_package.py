"""The package's structure: imports go one way, at module level only; the ctypes
binding (_lib.py) matches the C header include/mhc/mhc.h."""
import ast
import ctypes
import glob
import os
import re
import subprocess
import sys

from conftest import REPO

from mhc import _lib

PACKAGE = os.path.join(REPO, "python", "mhc")
HEADER = os.path.join(REPO, "include", "mhc", "mhc.h")


def package_files():
    """{module key: path} of every .py file of the package, subpackages included: "_core",
    "nn.block"; a package's __init__.py is the package's key ("nn"), the top one's
    "__init__"."""
    files = {}
    for path in glob.glob(os.path.join(PACKAGE, "**", "*.py"), recursive=True):
        parts = os.path.relpath(path, PACKAGE)[:-3].split(os.sep)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts) or "__init__"] = path
    return files


def package_imports(path):
    """[(node, module of the package it imports, at module level?)] of one .py file, the
    modules named by package_files' keys."""
    tree = ast.parse(open(path).read(), path)
    modules = set(package_files())
    relative = os.path.relpath(path, PACKAGE)
    parts = relative[:-3].split(os.sep) if not relative.startswith("..") else ["outside"]
    package = parts[:-1]  # the package a relative import starts from (a file outside: the top)
    found = []

    def key(names):
        return ".".join(names) or "__init__"

    def visit(node, top):
        for child in ast.iter_child_nodes(node):
            targets = []
            if isinstance(child, ast.Import):
                targets = [key(a.name.split(".")[1:]) for a in child.names
                           if a.name == "mhc" or a.name.startswith("mhc.")]
            elif isinstance(child, ast.ImportFrom) and (child.level or child.module == "mhc"
                                                        or (child.module or "").startswith("mhc.")):
                if child.level:
                    base = package[:len(package) - (child.level - 1)] + (child.module.split(".")
                                                                         if child.module else [])
                else:
                    base = child.module.split(".")[1:]
                # from X import a: the submodule X.a, or a name of X
                targets = [key(base + [a.name]) if key(base + [a.name]) in modules else key(base)
                           for a in child.names]
            found.extend((child, t, top) for t in targets)
            # Module level: the module body and the if/try/with blocks in it, not a def or class.
            nested = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef))
            visit(child, top and not nested)

    visit(tree, True)
    return found


def test_no_deferred_imports_within_the_package():
    deferred = []
    for name, path in sorted(package_files().items()):
        for node, target, top in package_imports(path):
            if not top:
                deferred.append(f"{name}:{node.lineno} imports {target} inside a def/class")
    assert not deferred, "\n".join(deferred)


def test_imports_within_the_package_go_one_way():
    graph = {}
    for name, path in package_files().items():
        graph[name] = {t for _, t, _ in package_imports(path) if t != name}
    assert {"nn", "nn.block", "nn.pre", "_core"} <= set(graph)
    assert {"_core", "ops", "nn.pre"} <= graph["nn.block"], graph["nn.block"]
    assert "__init__" not in set().union(*graph.values()), "a submodule imports the package itself"
    done, path = set(), []

    def walk(name):  # depth-first; a module met again on the current path closes a cycle
        assert name not in path, "import cycle: " + " -> ".join(path[path.index(name):] + [name])
        if name in done:
            return
        path.append(name)
        for target in sorted(graph.get(name, ())):
            walk(target)
        path.pop()
        done.add(name)

    for name in sorted(graph):
        walk(name)


def test_the_detector_sees_a_deferred_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from . import _lib\n\ndef f():\n    from .autograd import MhcPreFunction\n")
    assert [(t, top) for _, t, top in package_imports(str(bad))] == [("_lib", True), ("autograd", False)]


def test_the_detector_resolves_imports_in_a_subpackage():
    path = package_files()["nn.block"]
    found = {t for _, t, _ in package_imports(path)}
    assert {"_core", "ops", "nn.pre"} <= found and "__init__" not in found and "pre" not in found


def test_import_in_a_fresh_process():
    code = ("import mhc, mhc.nn\n"
            "names = ['npu_mhc_pre', 'npu_mhc_pre_backward', 'mhc_pre', 'mhc_head', 'MhcPreFunction', 'nn',\n"
            "         'set_num_threads', 'get_num_threads', 'set_output_cache', 'get_output_cache',\n"
            "         'set_isa', 'isa', 'available_isas', '__version__']\n"
            "missing = [n for n in names if not hasattr(mhc, n)]\n"
            "assert not missing, missing\n"
            "assert mhc.nn.MhcPre and mhc.ops.npu_mhc_pre is mhc.npu_mhc_pre\n"
            "assert mhc.nn.MhcBlock and mhc.nn.MhcHead and mhc.nn.expand_streams and mhc.nn.MhcParameters\n"
            "assert mhc.nn.reference.ReferenceMhcBlock.__mro__[1] is mhc.nn.MhcBlock\n"
            "print('ok', mhc.isa())\n")
    environ = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    for first in ("mhc", "mhc.autograd", "mhc.ops", "mhc.nn", "mhc.nn.block", "mhc.nn.reference"):
        # any module imported first
        proc = subprocess.run([sys.executable, "-c", f"import {first}\n" + code],
                              capture_output=True, text=True, env=environ, timeout=120)
        assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr


# The header, parsed just enough: comments dropped, #defines, enums and structs.

def header_text():
    text = open(HEADER).read()
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def header_defines(text):
    return {m[1]: int(m[2]) for m in re.finditer(r"^\s*#define\s+(MHC_\w+)\s+(-?\d+)\s*$", text, re.M)}


def header_enums(text):
    """{enum name: {enumerator: value}}."""
    enums = {}
    for m in re.finditer(r"typedef\s+enum\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        assert m[1] == m[3], m[0]
        values, value = {}, -1
        for item in filter(None, (s.strip() for s in m[2].split(","))):
            name, _, given = (s.strip() for s in item.partition("="))
            value = int(given, 0) if given else value + 1
            values[name] = value
        enums[m[1]] = values
    return enums


C_TYPES = {"void *": ctypes.c_void_p, "double": ctypes.c_double, "float": ctypes.c_float,
           "int32_t": ctypes.c_int32, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64, "int": ctypes.c_int,
}


def header_structs(text, defines, names=("mhc_tensor", "mhc_options")):
    """{struct name: [(field, ctypes type)]} of the structs named."""
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, re.S):
        assert m[1] == m[3], m[0]
        if m[1] not in names:
            continue
        fields = []
        for decl in filter(None, (s.strip() for s in m[2].split(";"))):
            f = re.fullmatch(r"(?:const\s+)?(?:struct\s+)?(\w+)\s*(\*?)\s*(\w+)\s*(?:\[\s*(\w+)\s*\])?", decl)
            assert f, f"{m[1]}: cannot parse the field {decl!r}"
            # A pointer to any struct (an opaque handle) is a pointer to ctypes.
            ctype = C_TYPES["void *" if f[2] else f[1]]
            if f[4]:
                ctype = ctype * (defines[f[4]] if f[4] in defines else int(f[4]))
            fields.append((f[3], ctype))
        structs[m[1]] = fields
    return structs


def lib_constants():
    return {k: v for k, v in vars(_lib).items() if k.isupper() and type(v) is int}


def compare_constants(text, constants):
    """The mismatches between the header's #defines and enumerators and _lib's constants
    (MHC_X in the header is _lib.X), both ways."""
    enums = header_enums(text)
    for name in ("mhc_dtype", "mhc_error_kind", "mhc_isa_id"):
        assert name in enums, f"enum {name} not found in {HEADER}"
    in_header = header_defines(text)
    for values in enums.values():
        in_header.update(values)
    assert "MHC_MAX_RANK" in in_header and "MHC_OK" in in_header
    problems = []
    for name, value in sorted(in_header.items()):
        ours = constants.get(name[4:])
        if ours != value:
            problems.append(f"{name} = {value} in the header, _lib.{name[4:]} = {ours}")
    for name in sorted(set(constants) - {n[4:] for n in in_header}):
        problems.append(f"_lib.{name} has no MHC_{name} in the header")
    return problems


def field_signature(ctype):
    if hasattr(ctype, "_length_"):
        return (ctype._type_, ctype._length_)
    return ctype


def compare_structs(text):
    structs = header_structs(text, header_defines(text))
    problems = []
    for c_name, ours in (("mhc_tensor", _lib.MhcTensor), ("mhc_options", _lib.MhcOptions)):
        assert c_name in structs, f"struct {c_name} not found in {HEADER}"
        theirs = [(n, field_signature(t)) for n, t in structs[c_name]]
        mine = [(n, field_signature(t)) for n, t in ours._fields_]
        if theirs != mine:
            problems.append(f"{ours.__name__}: _fields_ {mine} != header's {c_name} {theirs}")
    return problems


def test_constants_match_the_header():
    problems = compare_constants(header_text(), lib_constants())
    assert not problems, "\n".join(problems)


def test_structs_match_the_header():
    problems = compare_structs(header_text())
    assert not problems, "\n".join(problems)


def test_isa_names_follow_the_enum():
    ids = {k[4:].lower(): v for k, v in lib_constants().items() if k.startswith("ISA_")}
    assert ids.pop("default") == 0
    assert sorted(ids, key=ids.get) == list(_lib.ISA_NAMES)
    assert [ids[n] for n in _lib.ISA_NAMES] == list(range(1, len(_lib.ISA_NAMES) + 1))


def test_the_comparison_sees_a_changed_constant():
    text = header_text()
    constants = lib_constants()
    assert compare_constants(text, dict(constants, ERR_INVALID=161003)), "changed value missed"
    assert compare_constants(text, dict(constants, NEW_CODE=7)), "extra constant missed"
    assert compare_constants(text.replace("MHC_FP32 = 2", "MHC_FP32 = 3"), constants), "enum missed"
