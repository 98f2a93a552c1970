"""Mistakes nobody listed, named anyway: each equation of ``course_references.py`` with one
operator changed (mutation testing's operators, DeMillo, Lipton & Sayward 1978, chosen for tensor
code: + − × ÷ replaced, operands swapped, a term or a line left out; one element-wise function
or activation for another, or left out; nested calls in the other order; f(a + b) → f(a) + b;
sum for mean or over every axis; another attribute of the same object; a value read as another
of the equation's, or as 1 − itself; a small integer for another, a count one off; a comparison
turned; two names of a line swapped), run on the stored cases and sealed as a known mistake's
outputs are. A matching output is named by the change: "`q @ q.T` where ...".

INSTRUCTOR ONLY, and so is what it writes (``operator_mistakes.pt`` beside it): the descriptions
quote the reference's code, so only the class grader's judge reads them (``grade.py``); neither
the student tree nor its ``grader.pyz`` holds them.

    python -m course.authoring.operator_mistakes   # writes course/authoring/operator_mistakes.pt
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import hashlib
import inspect
import itertools
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from course.authoring import course_references as ref
from course.authoring import make_course_references as references
from minbert.checkpoint import atomic_write, load_trusted
from multitask.errors import run_command

OUT = Path(__file__).resolve().parent / "operator_mistakes.pt"
# What the stored mistakes are made from: the equations, this script, the script that makes the
# stored cases, and those cases (whose own test makes them again).
SOURCES = ("course_references.py", "operator_mistakes.py", "make_course_references.py")
CASES = Path(__file__).resolve().parents[1] / "reference_data.pt"

# Element-wise functions a student may put one for another (torch.X(t) or t.X()), and
# reductions (t.X(dim)) whose kind or axis a student may get wrong.
ELEMENTWISE = ("sigmoid", "tanh", "relu", "exp", "sqrt", "abs", "square", "log")
REDUCTIONS = ("sum", "mean", "amax", "norm", "logsumexp")
# Activations, as the equations name them, a student may put one for another.
ACTIVATIONS = ("gelu", "gelu_tanh", "torch.relu", "torch.nn.functional.silu", "torch.tanh")
SMALL_INTEGERS = (-3, -2, -1, 0, 1, 2, 3)  # an axis or an index: each may be written for another
MODULES = ("torch", "math", "F")  # names of modules, never swapped or replaced
ARITHMETIC = {
    ast.Add: (ast.Sub, ast.Mult),
    ast.Sub: (ast.Add,),
    ast.Mult: (ast.Div, ast.Add),
    ast.Div: (ast.Mult,),
    ast.Pow: (ast.Mult,),
}
TURNED = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
CONDITIONED = 100.0  # a variant whose outputs are larger than this times the expected is dropped
ZERO = 1e-6  # an output this small everywhere is zero: float32 rounding of values of order 1
VARIANT_SECONDS = 10.0  # a variant's call that runs longer is dropped (the equations take < 1 s)
STATEMENT_CHARS = 90  # a description quotes the whole line up to this length, else the change


@dataclass(frozen=True)
class Variant:
    """One equation (``function``, a name in course_references) with one change: the
    ``index``-th node of its syntax tree (``ast.walk`` order) replaced by the ``choice``-th of
    its ``changes``. Passed where a check's data takes a known mistake's key, it compares
    unequal to every key the equations test for, so each runs its correct branch."""

    function: str
    index: int
    choice: int
    description: str
    names: tuple[str, ...] = ()  # a value read as another: (the equation's name, the one read)
    complemented: str = ""  # a value read as 1 - itself: its name


def mentions(node: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))


def is_module_call(call: ast.Call) -> bool:
    """torch.X(...), math.X(...), F.X(...) or a plain function's call: not a method's."""
    func = call.func
    return isinstance(func, ast.Name) or (
        isinstance(func, ast.Attribute)
        and isinstance(func.value, ast.Name)
        and func.value.id in MODULES
    )


def call_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def with_name(call: ast.Call, name: str) -> ast.Call:
    new = copy.deepcopy(call)
    if isinstance(new.func, ast.Attribute):
        new.func.attr = name
    else:
        new.func.id = name
    return new


def arithmetic_changes(node: ast.BinOp) -> Iterator[ast.AST]:
    for op in ARITHMETIC.get(type(node.op), ()):
        yield ast.BinOp(node.left, op(), node.right)
    if isinstance(node.op, (ast.Sub, ast.Div, ast.MatMult, ast.Pow)):
        yield ast.BinOp(node.right, node.op, node.left)
    if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        yield node.left
    if isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
        yield node.right


@dataclass(frozen=True)
class Reads:
    """What an equation reads, for the changes that put one of its own things for another:
    ``attributes``, name -> the attributes read of it (``module.dense`` -> module: [dense]);
    ``names``, id of each value name read -> the names a student may read there instead
    (``names_in_reach``)."""

    attributes: dict[str, list[str]]
    names: dict[int, list[str]]


def reads_of(tree: ast.AST) -> Reads:
    return Reads(attributes_read(tree), names_in_reach(tree))


def names_in_reach(tree: ast.AST) -> dict[int, list[str]]:
    """id of each value name read -> the other names a student could have written there: the
    equation's parameters, the names its line reads and those assigned on earlier lines
    (``value_names``). Not a keyword's value (``min=eps``, ``dim=axis``): a setting, for which
    a tensor of the line is no slip."""
    values = value_names(tree)
    function = tree.body[0]
    parameters = [a.arg for a in function.args.args if a.arg in values]
    parents = parents_of(tree)
    assigned: dict[str, int] = {}  # name -> the line it is first assigned on
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id in values:
            assigned[n.id] = min(assigned.get(n.id, n.lineno), n.lineno)
    found = {}
    read = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id in values
    ]
    for n in read:
        if isinstance(parents.get(id(n)), ast.keyword):
            continue
        line = statement_of(n, parents)
        others = [m.id for m in ast.walk(line) if isinstance(m, ast.Name) and m.id in values]
        earlier = [name for name, at in assigned.items() if at < line.lineno]
        reach = dict.fromkeys([*parameters, *others, *earlier])
        found[id(n)] = [name for name in reach if name != n.id]
    return found


def attribute_changes(node: ast.Attribute, reads: Reads) -> Iterator[ast.AST]:
    """``obj.a`` read as another attribute that the equation reads of the same ``obj``: the
    wrong table, weight or layer."""
    if isinstance(node.value, ast.Name) and node.value.id not in MODULES:
        for other in reads.attributes.get(node.value.id, []):
            if other != node.attr:
                yield ast.Attribute(node.value, other, node.ctx)


def call_changes(node: ast.Call) -> Iterator[ast.AST]:
    name = call_name(node)
    method = isinstance(node.func, ast.Attribute) and not is_module_call(node)
    if name in ELEMENTWISE:
        for other in ELEMENTWISE:
            if other != name:
                yield with_name(node, other)
        yield node.func.value if method else node.args[0]
    if name in REDUCTIONS and method:
        yield from reduction_changes(node, name)
    if name in ("clamp", "clamp_min", "clamp_max") and method:
        yield node.func.value
    if name == "sum" and not method:
        yield with_name(node, "len")
    if node.args and isinstance(node.args[0], ast.BinOp) and isinstance(node.args[0].op, ast.Add):
        inner = node.args[0]  # f(a + b, ...) -> f(a, ...) + b and f(b, ...) + a
        for kept, moved in ((inner.left, inner.right), (inner.right, inner.left)):
            yield ast.BinOp(
                ast.Call(node.func, [kept, *node.args[1:]], node.keywords), ast.Add(), moved
            )
    if is_module_call(node) and node.args and isinstance(node.args[0], ast.Call):
        inner = node.args[0]  # f(g(x, ...), ...) -> g(f(x, ...), ...)
        if is_module_call(inner) and inner.args:
            outer = ast.Call(node.func, [inner.args[0], *node.args[1:]], node.keywords)
            yield ast.Call(inner.func, [outer, *inner.args[1:]], inner.keywords)


def reduction_changes(node: ast.Call, name: str) -> Iterator[ast.AST]:
    """Sum for mean and back, and over every axis (another axis is another integer: ``changes``
    of the constant)."""
    if name in ("sum", "mean"):
        yield with_name(node, "mean" if name == "sum" else "sum")
    if name in ("sum", "mean", "amax") and (node.args or node.keywords):
        yield ast.Call(node.func, [], [])


def name_changes(node: ast.Name, reads: Reads) -> Iterator[ast.AST]:
    """A value read as another of the equation's (``q @ q.T`` for ``q @ k.T``) or as its
    complement (``1 - mask``: a mask read the other way round; kept for tensors only), and an
    activation read as another (``F.silu`` for ``gelu``)."""
    if id(node) in reads.names:
        for other in reads.names[id(node)]:
            yield ast.Name(other, ast.Load())
        yield ast.BinOp(ast.Constant(1), ast.Sub(), ast.Name(node.id, ast.Load()))
    if node.id in ACTIVATIONS:
        for other in ACTIVATIONS:
            if other != node.id:
                yield ast.parse(other, mode="eval").body


def changes(node: ast.AST, reads: Reads) -> list[ast.AST]:
    """What ``node`` may be replaced by: a node of the same place (an expression, or the
    statement for an augmented assignment). ``reads``: what the equation reads."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return list(name_changes(node, reads))
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        return list(attribute_changes(node, reads))
    if isinstance(node, ast.BinOp):
        return list(arithmetic_changes(node))
    if isinstance(node, ast.AugAssign):
        turned = [ast.AugAssign(node.target, op(), node.value) for op in ARITHMETIC[type(node.op)]]
        return [ast.Pass(), *turned]  # the step left out, or another operator
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        return [ast.Pass()]  # an in-place step (m.mul_(β).add_(g)) left out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        if isinstance(node.operand, ast.Constant) and type(node.operand.value) is int:
            return [integer(n) for n in other_integers(-node.operand.value)]  # -n: one constant
        return [node.operand]
    if isinstance(node, ast.Call):
        return list(call_changes(node))
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in TURNED:
        return [ast.Compare(node.left, [TURNED[type(node.ops[0])]()], node.comparators)]
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [integer(n) for n in other_integers(node.value)]
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Name):
        return [
            ast.Subscript(node.value, ast.BinOp(node.slice, op(), ast.Constant(1)), node.ctx)
            for op in (ast.Sub, ast.Add)
        ]
    if isinstance(node, (ast.Assign, ast.Return)) and node.value is not None:
        return list(swapped_names(node))
    return []


def attributes_read(tree: ast.AST) -> dict[str, list[str]]:
    """name -> the attributes the function reads of it (``module.dense`` -> module: [dense]),
    but methods it calls."""
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    found: dict[str, list[str]] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and id(n) not in called:
            if n.attr not in found.setdefault(n.value.id, []):
                found[n.value.id].append(n.attr)
    return found


def value_names(tree: ast.AST) -> list[str]:
    """The names the equation binds to values, in order: its parameters and what it assigns;
    not ``mistake``, nor a name it only calls (a layer or a helper it is passed or defines)."""
    bound: list[str] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.arg) or isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            name = n.arg if isinstance(n, ast.arg) else n.id
            if name not in bound:
                bound.append(name)
    called = {
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    return [n for n in bound if n not in called | defined | {"mistake", *MODULES}]


def other_integers(value: int) -> list[int]:
    """What a student may write for the integer ``value``: any other of the small ones where it
    is small (an axis, an index: -3 to 3), else one off either way (a count)."""
    if value in SMALL_INTEGERS:
        return [n for n in SMALL_INTEGERS if n != value]
    return [value + 1, value - 1]


def integer(value: int) -> ast.expr:
    return ast.Constant(value) if value >= 0 else ast.UnaryOp(ast.USub(), ast.Constant(-value))


def swapped_names(statement: ast.Assign | ast.Return) -> Iterator[ast.AST]:
    """The statement with two of the names that its arithmetic reads swapped everywhere in it."""
    names = []
    for n in ast.walk(statement.value):
        if isinstance(n, ast.BinOp):
            for operand in (n.left, n.right):
                if isinstance(operand, ast.Name) and operand.id not in names:
                    names.append(operand.id)
    for a, b in itertools.combinations(names, 2):
        new = copy.deepcopy(statement)
        for n in ast.walk(new.value):
            if isinstance(n, ast.Name) and n.id in (a, b):
                n.id = b if n.id == a else a
        yield new


def parse(function: Callable) -> ast.Module:
    """The syntax tree of ``function`` (of the equation, where it is ``Generation.wrapped``)."""
    return ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(function))))


def mutable(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether a change of ``node`` can be a student's: on the equation's correct path (not in
    a branch that only a known mistake takes, nor in a test of the ``mistake`` argument), and
    not in a docstring or a default."""
    chain = [node]
    while id(chain[-1]) in parents:
        chain.append(parents[id(chain[-1])])
    for inner, outer in zip(chain, chain[1:]):
        if isinstance(outer, ast.arguments):
            return False
        if is_docstring(outer):
            return False
        if isinstance(outer, (ast.If, ast.IfExp)) and mentions(outer.test, "mistake"):
            if inner is outer.test or not_taken(outer, inner):
                return False
    if isinstance(node, ast.Constant) and isinstance(parents.get(id(node)), ast.UnaryOp):
        return False  # changed with its sign, as one constant
    return not (isinstance(node, ast.Compare) and mentions(node, "mistake"))


def not_taken(branching: ast.If | ast.IfExp, inner: ast.AST) -> bool:
    """Whether ``inner`` (the body or the else of ``branching``, or a statement of them) is the
    branch not taken when the ``mistake`` argument is None; False when the test reads more than
    ``mistake`` (both branches may run)."""
    names = {n.id for n in ast.walk(branching.test) if isinstance(n, ast.Name)}
    if names != {"mistake"}:
        return False
    taken = eval(compile(ast.Expression(branching.test), "<test>", "eval"), {"mistake": None})  # noqa: S307
    body = branching.body if isinstance(branching.body, list) else [branching.body]
    return (inner in body) != bool(taken)


def parents_of(tree: ast.AST) -> dict[int, ast.AST]:
    return {
        id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)
    }


def statement_of(node: ast.AST, parents: dict[int, ast.AST]) -> ast.AST:
    while not isinstance(node, ast.stmt) and id(node) in parents:
        node = parents[id(node)]
    return node


@functools.cache
def variants(name: str) -> tuple[Variant, ...]:
    """Every one-change variant of the equation ``name``, described by the line it changes
    (the variant's, then the reference's); the plainest change first (``plainness``), so that
    of two variants with the same outputs the plainer is the one kept."""
    tree = parse(getattr(ref, name))
    parents, reads = parents_of(tree), reads_of(tree)
    found = []
    for index, node in enumerate(list(ast.walk(tree))):
        if not mutable(node, parents):
            continue
        for choice, replacement in enumerate(changes(node, reads)):
            before, after = quoted(node, replacement, parents)
            if before != after:
                text = f"{after} where the reference has {before}"
                if isinstance(replacement, ast.Pass):
                    text = f"no {before}: the line left out"
                swapped = isinstance(node, ast.Name) and isinstance(replacement, ast.Name)
                names = (node.id, replacement.id) if swapped else ()
                complement = isinstance(node, ast.Name) and isinstance(replacement, ast.BinOp)
                variant = Variant(name, index, choice, text, names, node.id if complement else "")
                found.append((plainness(node, replacement), variant))
    return tuple(variant for _, variant in sorted(found, key=lambda pair: pair[0]))


def plainness(node: ast.AST, replacement: ast.AST) -> int:
    """0 for a line left out or changed (``p += x`` for ``p -= x``), 1 for a part left out, 2
    for an operator replaced, 3 for a function replaced, 4 for the rest (swaps, shifts, axes)."""
    if isinstance(node, (ast.AugAssign, ast.Expr)):
        return 0
    if any(replacement is child for child in ast.iter_child_nodes(node)):
        return 1
    if isinstance(node, ast.BinOp) and isinstance(replacement, ast.BinOp):
        if replacement.left is node.left and replacement.right is node.right:
            return 2
    if isinstance(node, ast.Call) and isinstance(replacement, ast.Call):
        if replacement.args == node.args and call_name(replacement) != call_name(node):
            return 3
    return 4


def replaced(tree: ast.AST, index: int, choice: int) -> ast.AST:
    """A copy of ``tree`` with the change made (``tree`` is left as it was)."""
    node = list(ast.walk(tree))[index]
    replacement = changes(node, reads_of(tree))[choice]
    with put(parents_of(tree)[id(node)], node, replacement):
        return ast.fix_missing_locations(copy.deepcopy(tree))


@contextlib.contextmanager
def put(parent: ast.AST, node: ast.AST, replacement: ast.AST) -> Iterator[None]:
    """``replacement`` in ``node``'s place in ``parent`` for the block, then ``node`` again."""
    for name, value in ast.iter_fields(parent):
        if value is node:
            setattr(parent, name, replacement)
            try:
                yield
            finally:
                setattr(parent, name, node)
            return
        if isinstance(value, list) and any(v is node for v in value):
            at = [id(v) for v in value].index(id(node))
            value[at] = replacement
            try:
                yield
            finally:
                value[at] = node
            return


def quoted(node: ast.AST, replacement: ast.AST, parents: dict[int, ast.AST]) -> tuple[str, str]:
    """`before` and `after`: the changed line, or the changed expression where the line is long."""
    statement = statement_of(node, parents)
    before = ast.unparse(correct_path(statement))
    with put(parents[id(node)], node, replacement):
        after = ast.unparse(correct_path(replacement if statement is node else statement))
    if max(len(before), len(after)) > STATEMENT_CHARS or "\n" in before + after:
        before = ast.unparse(correct_path(node))
        after = ast.unparse(correct_path(replacement))
    return f"`{before}`", f"`{after}`"


def correct_path(statement: ast.AST) -> ast.AST:
    """A copy of ``statement`` (or of an expression) as the equation runs it when ``mistake`` is
    None: each choice made on ``mistake`` (``a if mistake == "k" else b``, ``{...}.get(mistake,
    b)``, ``a if training and mistake != "k" else b`` -> ``a if training else b``) replaced by
    the branch taken, and ``mistake`` passed on to an equation left out, so that a quote shows
    no known mistake's branch."""

    class Taken(ast.NodeTransformer):
        def visit_Compare(self, node: ast.Compare) -> ast.AST:
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if names != {"mistake"}:
                return self.generic_visit(node)
            test = compile(ast.Expression(node), "<test>", "eval")
            return ast.Constant(bool(eval(test, {"mistake": None})))  # noqa: S307

        def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
            """``training and mistake != "k"`` -> ``training``: a test's known part dropped."""
            self.generic_visit(node)
            neutral = isinstance(node.op, ast.And)  # True changes nothing in an `and`
            kept = [
                v for v in node.values if not (isinstance(v, ast.Constant) and v.value is neutral)
            ]
            if any(isinstance(v, ast.Constant) and v.value is not neutral for v in kept):
                return ast.Constant(not neutral)
            if not kept:
                return ast.Constant(neutral)
            return kept[0] if len(kept) == 1 else ast.BoolOp(node.op, kept)

        def visit_IfExp(self, node: ast.IfExp) -> ast.AST:
            self.generic_visit(node)
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            if names == {"mistake"}:  # `a if mistake else b`, and the like
                test = compile(ast.Expression(node.test), "<test>", "eval")
                return node.body if eval(test, {"mistake": None}) else node.orelse  # noqa: S307
            if isinstance(node.test, ast.Constant):
                return node.body if node.test.value else node.orelse
            return node

        def visit_Call(self, node: ast.Call) -> ast.AST:
            self.generic_visit(node)
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get" and len(node.args) == 2:
                if isinstance(node.args[0], ast.Name) and node.args[0].id == "mistake":
                    return node.args[1]
            passed = node.args[-1:]  # an equation given the mistake, None: as if left out
            if passed and isinstance(passed[0], ast.Name) and passed[0].id == "mistake":
                node.args = node.args[:-1]
            return node

    return Taken().visit(copy.deepcopy(statement))


def compiled(variant: Variant) -> Callable:
    """The variant as a function of course_references (its globals, so that the equations it
    calls are looked up there)."""
    new_tree = replaced(parse(getattr(ref, variant.function)), variant.index, variant.choice)
    made: dict = {}
    exec(compile(new_tree, f"<{variant.function}, changed>", "exec"), vars(ref), made)  # noqa: S102
    return made[variant.function]


# ----------------------------------------------------------------------------------------------
# Running the variants on the stored cases


@dataclass
class Generation:
    """What one run of ``make`` has seen: the equations called since the last component's
    mistakes were asked for, the variants offered (by description), each variant's function,
    and the variants dropped: those that raised, ran too long, gave an output of another
    ``form`` (a number for a tensor), or a value that is not finite or zeros where the equation
    gives none (``zeros``)."""

    only: frozenset[str] | None = None  # the equations whose variants are made; None: every one
    called: set[str] = field(default_factory=set)
    offered: dict[str, Variant] = field(default_factory=dict)
    code: dict[Variant, Callable] = field(default_factory=dict)
    failed: set[Variant] = field(default_factory=set)
    active: list[Variant] = field(default_factory=list)
    # (equation, its arguments' ``form``) -> the ``form`` of what it returns for them
    forms: dict[tuple[str, object], object] = field(default_factory=dict)

    def mistakes_of(self, component: str) -> dict[Variant, str]:
        """``make_course_references.more_mistakes``: the variants of the equations that the
        component's expected outputs were computed with."""
        names, found = sorted(self.called), {}
        self.called.clear()
        for name in names:
            if self.only is not None and name not in self.only:
                continue
            for variant in variants(name):
                found.setdefault(variant.description, variant)
        self.offered |= found
        print(f"[operator_mistakes] {component}: {len(found)} variants of {', '.join(names)}")
        return {variant: text for text, variant in found.items()}

    def wrapped(self, name: str, original: Callable) -> Callable:
        """The equation ``name`` as the stored cases call it: where its ``mistake`` is a
        variant (and none is in play), that variant's function takes the equation's place in
        course_references for the call."""
        signature = inspect.signature(original)

        @functools.wraps(original)
        def equation(*args, **kwargs):
            passed = dict(signature.bind(*args, **kwargs).arguments)
            variant = passed.pop("mistake", None)
            if self.active or not isinstance(variant, Variant):
                out = original(*args, **kwargs)
                if variant is None and not self.active:  # the expected outputs' equations
                    self.called.add(name)
                    self.forms[name, form(passed)] = form(out)
                return out
            if variant not in self.code:
                self.code[variant] = compiled(variant)
            changed, held = self.code[variant], vars(ref)[variant.function]
            vars(ref)[variant.function] = changed
            self.active.append(variant)
            try:
                with time_limit(VARIANT_SECONDS), warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a variant's misuse of torch, dropped anyway
                    own_args, own_kwargs = copies(args, kwargs)
                    out = (changed if name == variant.function else original)(
                        *own_args, **own_kwargs
                    )
            except Exception:  # noqa: BLE001 - a variant that raises is dropped
                out = None
            finally:
                vars(ref)[variant.function] = held
                self.active.pop()
            if out is not None and form(out) != self.forms.get((name, form(passed))):
                out = None  # a number where the equation gives a tensor, floats for ids, ...
            if name == variant.function and not read_in_kind(passed, variant):
                out = None  # a flag read where a tensor belongs, 1 - eps, ...
            if out is None:  # the equation as it is, for outputs of the right shape
                self.failed.add(variant)
                return self.unchanged(original, variant, args, kwargs)
            if (
                not finite(out)
                or zeros(out)
                and not zeros(self.unchanged(original, variant, args, kwargs))
            ):
                self.failed.add(variant)
            return out

        return equation

    def unchanged(self, original: Callable, variant: Variant, args, kwargs) -> object:
        """The equation's outputs without the variant (passed ``variant`` as its mistake)."""
        self.active.append(variant)
        try:
            return original(*args, **kwargs)
        finally:
            self.active.pop()


def read_in_kind(passed: dict, variant: Variant) -> bool:
    """Whether ``variant`` reads the equation's arguments (``passed``) as a student could: a value
    swapped for one of its own ``form`` (a tensor for a tensor, not a flag), and 1 − x only of a
    tensor (a mask; a number's complement, 1 − eps, is a setting, no slip)."""
    forms = {form(passed[name]) for name in variant.names if name in passed}
    complemented = passed.get(variant.complemented, torch.ones(()))
    return len(forms) <= 1 and isinstance(complemented, torch.Tensor)


def copies(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The arguments a variant is called with: copies, where they can be made, so that a
    variant that changes what it is passed (a model, a list of groups) leaves the next call's
    as they were."""
    try:
        return copy.deepcopy((args, kwargs))
    except Exception:  # noqa: BLE001 - a generator, a closure: passed as they are
        return args, kwargs


class OutOfTime(Exception):
    """A variant's call ran past ``VARIANT_SECONDS``."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``OutOfTime`` in the block once it has run ``seconds`` (a real-time timer)."""

    def expired(signum, frame):
        raise OutOfTime(f"past {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def zeros(out: object) -> bool:
    """Whether every floating-point value of an equation's output is 0, up to float32 rounding
    (``ZERO``): a variant that gives zeros where the equation does not names nothing (any code
    that computes nothing, or 1 − 1, gives them), and is dropped."""
    floats = [t for t in tensors(out) if t.is_floating_point()]
    return bool(floats) and all(bool((t.abs() <= ZERO).all()) for t in floats)


def form(out: object) -> object:
    """What an equation's output (or its arguments) is made of, values aside: a tensor of a
    dtype, a number, or a tuple, list or dict of those."""
    if isinstance(out, torch.Tensor):
        return f"tensor of {out.dtype}"
    if isinstance(out, (tuple, list)):
        return type(out).__name__, tuple(form(o) for o in out)
    if isinstance(out, dict):
        return tuple((key, form(o)) for key, o in out.items())
    return "number" if isinstance(out, (int, float)) else type(out).__name__


def tensors(out: object) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in tensors(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in tensors(o)]
    return []


def finite(out: object) -> bool:
    if isinstance(out, torch.Tensor):
        return not out.is_floating_point() or bool(out.isfinite().all())
    if isinstance(out, (tuple, list)):
        return all(finite(o) for o in out)
    if isinstance(out, dict):
        return all(finite(o) for o in out.values())
    return not isinstance(out, float) or math.isfinite(out)


def equations() -> dict[str, Callable]:
    """The equations of course_references: its functions that take a ``mistake``."""
    return {
        name: f
        for name, f in vars(ref).items()
        if inspect.isfunction(f) and "mistake" in inspect.signature(f).parameters
    }


def make() -> dict:
    """{"operator mistakes": {path of a stored case: {description: sealed outputs}}}: every
    variant that changes a case's outputs, raises nothing, and gives outputs of its own (not
    those of a known mistake or of an earlier, plainer variant), the same on torch's plain CPU
    kernels (``on_plain_kernels``: another CPU's rounding must not move what names a mistake)."""
    data, kept = run_variants()
    found = dict(cases_of(data, (), kept, distinct=True))
    plain = on_plain_kernels()
    return {
        "operator mistakes": {
            path: kept_here
            for path, mistakes in found.items()
            if (kept_here := {t: s for t, s in mistakes.items() if agree(s, plain, path, t)})
        },
        "made from": made_from(),
    }


def made_from() -> str:
    """A digest of what the stored mistakes are made from (``SOURCES``' code, its comments,
    docstrings and layout aside; and the stored cases' bytes): when it changes, the file is made
    again."""
    digest = hashlib.sha256()
    for name in SOURCES:
        tree = ast.parse((Path(__file__).resolve().parent / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and is_docstring(body[0]):
                node.body = body[1:] or [ast.Pass()]
        digest.update(ast.dump(tree).encode())
    digest.update(CASES.read_bytes())
    return digest.hexdigest()


def is_docstring(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def on_plain_kernels() -> dict:
    """Every kept variant, made again in a process on torch's plain CPU kernels
    (``ATEN_CPU_CAPABILITY=default``, as ``make test``'s second pass runs)."""
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "plain.pt"
        made = (
            "import sys, torch; from course.authoring import operator_mistakes as om; "
            "data, kept = om.run_variants(); "
            "torch.save(dict(om.cases_of(data, (), kept, distinct=False)), sys.argv[1])"
        )
        env = os.environ | {"ATEN_CPU_CAPABILITY": "default"}
        subprocess.run(
            [sys.executable, "-c", made, str(out)],
            cwd=Path(__file__).resolve().parents[2],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return load_trusted(out)


def agree(sealed: dict, other: dict, path: tuple, text: str) -> bool:
    """Whether the variant ``text`` of the case ``path`` was made with the same sealed outputs
    in ``other`` (kind, shape and projections within float32 rounding: ``same_seal``)."""
    again = other.get(path, {}).get(text)
    return again is not None and all(
        name in again and same_seal(s, again[name]) for name, s in sealed.items()
    )


def same_seal(a: dict, b: dict) -> bool:
    """Two seals of one output alike up to float32 rounding on another CPU: kind and shape, and
    projections within 1e-6 + 1e-5·|p| (the stored reference data's own test)."""
    if (a["kind"], a["shape"]) != (b["kind"], b["shape"]):
        return False
    if "values" in a:
        return bool(torch.isclose(a["values"], b["values"], rtol=1e-5, atol=1e-6).all())
    return True


def run_variants(only: frozenset[str] | None = None) -> tuple[dict, dict[str, bool]]:
    """The stored data as ``make_course_references`` makes it, with the variants of the
    equations each case ran (of those ``only`` names, where given) among its mistakes; and
    each variant's description -> whether it is kept (it raised nothing and gave finite values
    of the equation's form): a mistake of the data that is not there is a known one."""
    run = Generation(only)
    originals = equations()
    try:
        for name, original in originals.items():
            vars(ref)[name] = run.wrapped(name, original)
        references.more_mistakes = run.mistakes_of
        data = references.make()
    finally:
        vars(ref).update(originals)
        references.more_mistakes = references.no_more_mistakes
    return data, {text: variant not in run.failed for text, variant in run.offered.items()}


def cases_of(
    data: dict, path: tuple, kept: dict[str, bool], distinct: bool
) -> Iterator[tuple[tuple, dict]]:
    """(path, {description: sealed outputs}) of the variants ``kept`` in each stored case that
    change its outputs and not their shapes, ``well_conditioned``; with ``distinct``, only
    those whose outputs are not a known mistake's or an earlier variant's, within float32
    rounding (``same_mistake``: ``scores + 1`` before a softmax is no mask at all)."""
    if "expected" in data and "mistakes" in data:
        seen = [s for t, s in data["mistakes"].items() if t not in kept]  # the known ones
        found = {}
        for text, sealed in data["mistakes"].items():
            if not kept.get(text) or not sealed or not same_form(sealed, data["expected"]):
                continue
            if not well_conditioned(sealed, data["expected"]):
                continue
            if distinct and any(same_mistake(sealed, other) for other in seen):
                continue
            seen.append(sealed)
            found[text] = sealed
        if found:
            yield path, found
        return
    for key, value in data.items():
        if isinstance(value, dict):
            yield from cases_of(value, (*path, key), kept, distinct)


def same_form(sealed: dict, expected: dict) -> bool:
    """Whether each of a mistake's outputs has the shape and the sealed kind of the expected
    one (a student's output of another shape fails on its shape, and needs no name)."""
    return all(
        (s["shape"], s["kind"]) == (expected[n]["shape"], expected[n]["kind"])
        for n, s in sealed.items()
    )


def well_conditioned(sealed: dict, expected: dict) -> bool:
    """Whether a mistake's projected outputs stay within ``CONDITIONED`` times the expected
    ones' scale: a change that divides by a value near zero gives outputs that float32
    rounding on another CPU moves far (it would name a mistake on one machine and not on
    another), and is not kept."""
    for name, s in sealed.items():
        if "values" in s and "values" in expected[name]:
            scale = max(1.0, float(expected[name]["values"].abs().max()))
            if not float(s["values"].abs().max()) <= CONDITIONED * scale:
                return False
    return True


def same_mistake(a: dict, b: dict) -> bool:
    """Two mistakes' sealed outputs alike: the same outputs changed, each projected within
    float32 rounding (``same_seal``), or, where sealed by digests alone, with the same digests."""
    return a.keys() == b.keys() and all(same_output(a[n], b[n]) for n in a)


def same_output(a: dict, b: dict) -> bool:
    if "values" in a:
        return same_seal(a, b)
    return same_seal(a, b) and a.get("digests", a.get("digest")) == b.get(
        "digests", b.get("digest")
    )


def written_here(path: Path) -> bool:
    try:
        data = load_trusted(path)
    except Exception:  # noqa: BLE001 - anything that is not such a file is not ours
        return False
    return isinstance(data, dict) and set(data) == {"operator mistakes", "made from"}


def main(argv: list[str] | None = None) -> int:
    parser = references.writer_parser(
        "course.authoring.operator_mistakes", __doc__.split("\n\n")[0], OUT
    )

    def body() -> None:
        args = parser.parse_args(argv)
        references.check_out(args.out, args.overwrite, written_here, "a file of operator mistakes")
        data = make()
        atomic_write(args.out, lambda stream: torch.save(data, stream))
        count = sum(len(m) for m in data["operator mistakes"].values())
        print(f"wrote {args.out}: {count} mistakes ({args.out.stat().st_size / 1024:.0f} KiB)")

    return run_command(body, "--out is as it was")


if __name__ == "__main__":
    sys.exit(main())
