"""One SIMT function's body, analysed: its names resolved (resolve.py), what each statement
does (effects.py), and which locals and loops are the same in every lane (uniformity.py).
regions.py then sorts the statements into the pieces emit.py writes.
"""
from __future__ import annotations

from . import syntax as sx
from .effects import Effects
from .resolve import Var, resolve
from .uniformity import mark


class Function:
    """One SIMT function's body, analysed."""

    def __init__(self, unit, body: sx.Block, params: list[Var], sync_names: set[str], members: dict[str, bool],
                 has_this: bool, ref_params: dict[str, set[int]], fn_tparams: frozenset = frozenset()):
        self.unit = unit
        self.body = body
        self.params = params
        self.has_this = has_this
        names = resolve(unit.toks, body, params, members, has_this)
        self.vars: list[Var] = names.vars
        self.name_var = names.name_var        # token of a name -> the local it names
        self.member_toks = names.member_toks  # tokens of implicit member names (in a method)
        this_var = Var("this", "this", uniform=False) if has_this else None
        self.effects = Effects(unit, names, this_var, sync_names, ref_params, fn_tparams)
        self.info = self.effects.statements(body)  # id(statement or head expression) -> Info
        self.loop_varying = mark(self)             # ids of loops whose trip count differs between lanes
