"""Function constants: ``constant T name [[function_constant(i)]];`` gets the value bound for this build.

Values are given by name or by index (a library's value and a per-kernel
override: the later entry wins). ``is_function_constant_defined(name)`` becomes
true or false. A kernel parameter declared ``[[function_constant(c)]]`` exists
only when ``c`` is true (an unset constant is false). A kernel that uses a
constant given no value cannot be created, as on Metal: ``find_unset_uses``
names the first such constant per kernel (a use in a function that also tests
``is_function_constant_defined`` of it counts as guarded).
"""
from __future__ import annotations

from ..consteval import const_int, cpp_literal
from ..model import FnDef, Param, Unit
from ..source import MslError, match
from ..tokens import tokenize_line


def bind(unit: Unit) -> None:
    toks, src, constants = unit.toks, unit.src, unit.constants
    n = len(toks)
    used: set = set()
    defined_checks: dict[str, list[int]] = {}  # name -> token index of each is_function_constant_defined(name)
    for j in range(n - 3):
        if (toks[j].text == "is_function_constant_defined" and toks[j + 1].text == "("
                and toks[j + 3].text == ")"):
            defined_checks.setdefault(toks[j + 2].text, []).append(j)
    for k, (end, attrs) in list(unit.attr_at.items()):
        fc = [a for a in attrs if a.name == "function_constant"]
        if not fc or (end + 1 < n and toks[end + 1].text in (",", ")")):
            continue  # [[function_constant(name)]] on a kernel parameter: read with the parameters
        unit.consumed.add(k)
        try:
            idx = const_int(fc[0].args)
        except ValueError:
            idx = None  # e.g. a constexpr variable: the constant can still be bound by name
        name_tok = toks[k - 1]
        semi = end + 1
        if semi >= n or toks[semi].text != ";" or name_tok.kind != "id":
            raise src.error(toks[k], "a function constant is declared as `constant T name [[function_constant(i)]];`")
        keys = [c for c in constants
                if c == name_tok.text or (idx is not None and c == idx and not isinstance(c, bool))]
        key = keys[-1] if keys else None
        if key is not None:
            used.update(keys)
            src.replace(k, end, f"= {cpp_literal(constants[key])}")
        else:
            src.replace(k, end, "{}")
        defined = key is not None
        unit.fc_values[name_tok.text] = constants[key] if defined else None
        unit.fc_at[name_tok.text] = k - 1
        for j in defined_checks.get(name_tok.text, ()):
            src.replace(j, j + 3, "true" if defined else "false")
    unknown = [k for k in constants if k not in used]
    if unknown:
        raise MslError("<constants>", 0, 0, f"no function constant named or numbered {unknown[0]!r} in the source; "
                       "declare it as `constant T name [[function_constant(i)]];` or drop it from constants=")
    for f in unit.functions:
        for p in f.params:
            if p.when:
                p.present = _param_present(unit, f, p)


def _param_present(unit: Unit, f: FnDef, p: Param) -> bool:
    """Value of the condition in a parameter's [[function_constant(...)]] (an unset constant is false)."""
    fc = unit.fc_values
    text = " ".join("1" if t.text in fc and fc[t.text] else "0" if t.text in fc else t.text
                    for t in tokenize_line(p.when, 0))
    try:
        present = bool(const_int(text))
    except ValueError:
        raise unit.src.error(f.tok, f"[[function_constant({p.when})]] on parameter '{p.name}' must name a "
                                    "function constant declared as `constant bool c [[function_constant(i)]];`") from None
    if present and p.kind in ("buffer", "scalar"):
        for q in f.params:
            if q is not p and q.present and q.kind in ("buffer", "scalar") and q.index == p.index and (
                    not q.when or f.params.index(q) < f.params.index(p)):
                raise unit.src.error(f.tok, f"parameters '{q.name}' and '{p.name}' both use [[buffer({p.index})]]")
    return present


def find_unset_uses(unit: Unit, reach, facts=None, positions: dict | None = None) -> None:
    """Sets each kernel's unset_constant: a constant with no value that its body, or a function it
    reaches, reads. Not counted, as Metal's specialisation folds them away: uses in a function that
    tests ``is_function_constant_defined`` of the constant; bool constants that make a parameter
    optional (unset is false there); uses in a branch another constant's value rules out
    (``c ? use : other``, ``if (c) { use }``, ``if (!c) { use }``). With clang's facts
    (clang_facts.Facts and the rendered text's positions), a name is a use only where clang
    resolves it to the constant: a parameter or local of the same name shadows it."""
    fc = unit.fc_values
    gates = {t.text for f in unit.functions for p in f.params if p.when for t in tokenize_line(p.when, 0)}
    unset = {name for name, v in fc.items() if v is None and name not in gates}
    if not unset:
        return
    toks = unit.toks
    resolved = _resolved_uses(unit, unset, facts, positions)
    uses: dict[str, str] = {}
    for k in unit.kernels:
        k.unset_constant = ""
    for f in unit.functions:
        a, b = f.body
        dead = _dead_branches(toks, a, b, fc)
        ids = {t.text for k, t in enumerate(toks[a:b], a)
               if t.kind == "id" and k not in dead and t.text in unset
               and (t.text not in resolved or k in resolved[t.text])}
        guarded = {toks[j + 2].text for j in range(a, b - 3) if toks[j].text == "is_function_constant_defined"}
        hit = sorted(ids - guarded)
        if hit and not uses.get(f.name):
            uses[f.name] = hit[0]
    for k in unit.kernels:
        seen, todo = set(), [k.function] + [t.text for t in toks[k.targs[0]:k.targs[1] + 1] if t.kind == "id"]
        while todo and not k.unset_constant:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            k.unset_constant = uses.get(name, "")
            todo.extend(sorted(reach.calls.get(name, ())))


def _resolved_uses(unit: Unit, names: set[str], facts, positions: dict | None) -> dict[str, set[int]]:
    """Constant name -> the tokens clang resolves to it, for the constants whose declaration the
    facts know."""
    if facts is None or positions is None:
        return {}
    from ..clang_facts import name_token
    where = {i: p for p, i in positions.items()}
    out = {}
    for name in names:
        at = where.get(unit.fc_at.get(name, -1))
        if at is not None:
            out[name] = {name_token(s, positions, unit.toks) for s in facts.var_refs.get(at, ())}
    return out


def _dead_branches(toks, a: int, b: int, fc: dict) -> set[int]:
    """Token indices in [a, b) that a constant's known value rules out."""
    def value(k):  # the truth of the constant named by toks[k], or None
        v = fc.get(toks[k].text)
        return None if v is None else bool(v)
    dead: set[int] = set()
    for k in range(a, b - 1):
        t = toks[k].text
        if t == "?" and k > a and value(k - 1) is False:  # c ? A : B, c false: A
            depth, j = 0, k + 1
            while j < b and not (depth == 0 and toks[j].text == ":"):
                depth += toks[j].text in "([{?"
                depth -= toks[j].text in ")]}" or (toks[j].text == ":" and depth > 0)
                j += 1
            dead.update(range(k + 1, j))
        elif t == "if" and toks[k + 1].text == "(":
            neg = toks[k + 2].text == "!"
            c = k + 3 if neg else k + 2
            if c + 1 < b and toks[c + 1].text == ")" and value(c) is not None and value(c) == neg \
                    and toks[c + 2].text == "{":
                dead.update(range(c + 2, match(toks, c + 2, "{", "}") + 1))
    return dead
