"""Generates the launchers appended to a pre-passed source.

Each kernel gets a constexpr pointer to it, an ``mk_arg_info`` table whose
types are filled in by the compiler from the real parameter types (so the
module describes itself), and a launch function that runs a range of
threadgroups. The module exports ``metalkit_module()`` returning the table.
"""
from __future__ import annotations

from .diagnostics import LAUNCHERS
from .model import StructDef
from .prepass import Kernel
from .tokens import c_escape

_KIND = {"buffer": "MK_ARG_BUFFER", "scalar": "MK_ARG_SCALAR",
         "threadgroup": "MK_ARG_THREADGROUP", "builtin": "MK_ARG_BUILTIN"}

# Builtin attribute -> value, from the mk::thread_ids `t` of the current thread.
_BUILTIN = {
    "thread_position_in_grid": "t.pos_in_grid",
    "thread_position_in_threadgroup": "t.pos_in_group",
    "threadgroup_position_in_grid": "t.group_pos",
    "threads_per_threadgroup": "t.group_size",
    "dispatch_threads_per_threadgroup": "t.dispatch_group_size",
    "threadgroups_per_grid": "t.ngroups",
    "threads_per_grid": "t.grid",
    "grid_size": "t.grid",
    "grid_origin": "mk::u3{0u, 0u, 0u}",
    "thread_index_in_threadgroup": "t.index_in_group",
    "thread_execution_width": "32u",
    "threads_per_simdgroup": "32u",
    "thread_index_in_simdgroup": "(t.index_in_group % 32u)",
    "simdgroup_index_in_threadgroup": "(t.index_in_group / 32u)",
    "simdgroups_per_threadgroup": "((t.group_size.x * t.group_size.y * t.group_size.z + 31u) / 32u)",
    "dispatch_simdgroups_per_threadgroup":
        "((t.dispatch_group_size.x * t.dispatch_group_size.y * t.dispatch_group_size.z + 31u) / 32u)",
    "thread_index_in_quadgroup": "(t.index_in_group % 4u)",
    "quadgroup_index_in_threadgroup": "(t.index_in_group / 4u)",
    "quadgroups_per_threadgroup": "((t.group_size.x * t.group_size.y * t.group_size.z + 3u) / 4u)",
    "dispatch_quadgroups_per_threadgroup":
        "((t.dispatch_group_size.x * t.dispatch_group_size.y * t.dispatch_group_size.z + 3u) / 4u)",
}


def _c_string(s: str) -> str:
    return '"' + c_escape(s) + '"'


def layouts(structs: list[StructDef]) -> list[str]:
    """``mk::fields<S>`` for each struct the front end read: offsetof/sizeof tables the compiler fills.

    Each is a partial specialization (the extra parameter ``V``), so a table is only
    instantiated for a struct a kernel parameter uses.
    """
    out = ["#pragma clang diagnostic push", '#pragma clang diagnostic ignored "-Winvalid-offsetof"', "namespace mk {"]
    seen = set()
    for s in structs:
        if s.qualified in seen:
            continue  # one table per type
        seen.add(s.qualified)
        head = ", ".join(s.params + ["class __mk_V"])
        rows = [f"  field<decltype(__S::{m})>({_c_string(m)}, __builtin_offsetof(__S, {m}))," for m in s.members]
        out.append(f"template <{head}> struct fields<{s.qualified}, __mk_V> {{")
        out.append(f"  using __S = typename dep<{s.qualified}, __mk_V>::type;")
        out.append(f"  static constexpr mk_field_info table[{max(len(rows), 1)}] = {{")
        out.extend(rows or ["  {}"])
        out.append("  };")
        out.append(f"  static constexpr mk_struct_info value = {{sizeof(__S), alignof(__S), {len(rows)}, table}};")
        out.append("  static constexpr const mk_struct_info* info = &value;")
        out.append("};")
    out += ["}  // namespace mk", "#pragma clang diagnostic pop"]
    return out


def launchers(kernels: list[Kernel], structs: list[StructDef] = (), checked: bool = False,
              logs: bool = False) -> str:
    """The launchers and the module's tables. ``checked``: a checked build (check= races, uninit,
    lockstep), where every thread is its own fiber, so the runtime knows which made an access.
    ``logs``: the source names os_log, so a kernel run as a loop tells its log calls which
    thread runs (launch.h run_groups<true>; otherwise the loop keeps the thread's ids to itself)."""
    out = [f'# 1 "{LAUNCHERS}"', "#include <metalkit/launch.h>"]
    out += layouts(list(structs))
    out.append("namespace {")
    for n, k in enumerate(kernels):
        fp = f"__mk_k{n}"
        out.append(f"constexpr auto {fp} = {k.pointer};")
        out.append(f"using __mk_F{n} = decltype({fp});")
        rows = []
        for i, p in enumerate(k.params):
            if not p.present:
                continue  # [[function_constant(c)]] with c false: no argument to bind
            rows.append(f"  mk::describe<mk::param_t<__mk_F{n}, {i}>>({_c_string(p.name)}, {_c_string(p.decl)}, "
                        f"{_c_string(p.builtin)}, {p.index}, {_KIND[p.kind]}, {p.space}, {p.array}),")
        out.append(f"const mk_arg_info __mk_args{n}[] = {{")
        out.extend(rows or ["  {}"])
        out.append("};")
        binds, call = [], []
        slot = 0  # argument slot: position among the parameters in the table
        for i, p in enumerate(k.params):
            P = f"mk::param_t<__mk_F{n}, {i}>"
            if not p.present:
                # Never read by the kernel (it tests the same constant): null pointer, or zero.
                call.append(f"mk::bind<{P}>::get(nullptr)" if "*" in p.decl or "&" in p.decl else f"{P}{{}}")
                continue
            if p.kind == "builtin":
                call.append(f"mk::builtin<{P}>({_BUILTIN[p.builtin]})")
            elif p.kind == "threadgroup":
                binds.append(f"  {P} a{i} = ({P})(tg + (unsigned long long)d->args[{slot}]);")
                call.append(f"a{i}")
            else:
                binds.append(f"  {P} a{i} = mk::bind<{P}>::get(d->args[{slot}]);")
                call.append(f"a{i}")
            slot += 1
        out.append(f"void __mk_launch{n}(const mk_dispatch* d, mk_u64 first, mk_u64 last, char* tg, "
                   "volatile mk_u64* at) {")
        out.append("  (void)tg;")
        out.extend(binds)
        if k.execution == "simt" and k.regions:
            runner = f"mk::run_groups_simt_regions(d, first, last, at, {k.regions}, "  # never checked (prepass)
        elif k.execution == "simt":
            # A checked build runs on fibers only (checked_access.h tells stack memory by address).
            fibers = 2 if checked else int(k.uses_barrier)
            runner = f"mk::run_groups_simt(d, first, last, at, {fibers}, "
        elif k.needs_sync or checked:
            runner = "mk::run_groups_fibers(d, first, last, at, "
        else:
            runner = f"mk::run_groups<{'true' if logs else 'false'}>(d, first, last, at, "
        if k.streamed:  # launch.h run_groups_streamed hands the body where each output's stores go
            index = f"mk::param_t<__mk_F{n}, {k.stream_index}>"
            runner = f"mk::run_groups_streamed<{'true' if logs else 'false'}, {index}>(d, first, last, at, "
            for j, i in enumerate(k.streamed):
                call[call.index(f"a{i}")] = f"__mk_s(a{i}, {j})"
        out.append(f"  {runner}[&](const mk::thread_ids& t{', auto __mk_s' if k.streamed else ''}) "
                   "__attribute__((always_inline)) {")
        out.append("    (void)t;")
        # A split kernel is inlined into its launcher's loops over regions and SIMD-groups, where
        # what each call would look up again (its frame, threadgroup storage, its slots) is found once.
        inline = "[[clang::always_inline]] " if k.execution == "simt" and k.regions else ""
        out.append(f"    {inline}{fp}({', '.join(call)});")
        out.append("  }" + "".join(f", a{i}" for i in k.streamed) + ");")
        out.append("}")
    out.append("const mk_kernel_info __mk_kernels[] = {")
    for n, k in enumerate(kernels):
        flags = "0"
        if k.needs_sync or checked:
            flags = "MK_KERNEL_SIMT" if k.execution == "simt" else "MK_KERNEL_NEEDS_FIBERS"
        if k.uses_barrier:
            flags += " | MK_KERNEL_BARRIERS"
        execution = _c_string(k.execution)
        if k.streamed:  # as the compiler finds the types: a struct element, say, is stored in place
            types = ", ".join(f"mk::param_t<__mk_F{n}, {i}>" for i in (k.stream_index, *k.streamed))
            streams = f"mk::streams<{types}>()"
            flags += f" | ({streams} ? MK_KERNEL_STREAMS : 0)"
            execution = f'{streams} ? {execution} : "loop"'
        if k.threadgroup_variables:
            flags += " | MK_KERNEL_TG_VARIABLES"
        nargs = sum(p.present for p in k.params)
        out.append(f"  {{{_c_string(k.host_name)}, __mk_args{n}, {nargs}, (unsigned)({k.max_threads}), {flags}, 0, "
                   f"__mk_launch{n}, {_c_string(k.file)}, {k.line}, {execution}, "
                   f"{_c_string(k.unset_constant)}}},")
    if not kernels:
        out.append("  {}")
    out.append("};")
    out.append("const mk_module_info __mk_module = {MK_ABI_VERSION, "
               f"{len(kernels)}, __mk_kernels}};")
    out.append("}  // namespace")
    out.append("MK_EXPORT const mk_module_info* metalkit_module(void) { return &__mk_module; }")
    if checked:
        out.append("#include <metalkit/checked_access.h>")
    return "\n".join(out) + "\n"
