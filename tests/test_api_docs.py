"""Every public name (memleak.__all__) and its public methods say what they do, with type hints."""
import inspect

import pytest

import memleak


def _public_callables():
    for name in memleak.__all__:
        obj = getattr(memleak, name)
        if inspect.isfunction(obj):
            yield name, obj, obj
        elif inspect.isclass(obj):
            yield name, obj, None
            for attr, value in vars(obj).items():
                fn = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
                if not attr.startswith("_") and inspect.isfunction(fn):
                    yield f"{name}.{attr}", fn, fn


@pytest.mark.parametrize(("name", "obj", "fn"), list(_public_callables()), ids=lambda v: v if isinstance(v, str) else "")
def test_documented_and_typed(name, obj, fn):
    assert inspect.getdoc(obj), f"{name} has no docstring"
    if fn is not None:
        sig = inspect.signature(fn)
        untyped = [p.name for p in sig.parameters.values() if p.name not in ("self", "cls")
                   and p.annotation is inspect.Parameter.empty]
        assert not untyped, f"{name}: parameters without a type hint: {untyped}"
        assert sig.return_annotation is not inspect.Signature.empty, f"{name} has no return type hint"
