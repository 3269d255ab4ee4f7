"""JSON Schema's meaning of an absent additionalProperties (`gemmad-cli grammar --spec-keys`,
the server's json_schema_extra_keys) and the schema features MaskBench showed missing, through
`gemmad-cli grammar --schema S --check I` (helpers and soundness rule of test_schema_merge.py:
whatever is accepted must validate)."""
import subprocess

from test_schema_merge import CLI, accepts, cli_built, compile_schema, valid  # noqa: F401

SPEC = ("--spec-keys",)
OBJ = {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}},
       "required": ["a"]}


def check(tmp_path, schema, good, bad, flags=SPEC):
    rc, err, sf = compile_schema(tmp_path, schema, flags)
    assert rc == 0, err
    for inst in good:
        assert valid(schema, inst), f"fixture error: {inst} is not valid"
        assert accepts(sf, tmp_path, inst, flags), f"valid {inst} rejected"
    for inst in bad:
        assert not accepts(sf, tmp_path, inst, flags), f"{inst} accepted"


def test_declared_keys_only_by_default(tmp_path):
    rc, err, sf = compile_schema(tmp_path, OBJ)
    assert rc == 0, err
    assert accepts(sf, tmp_path, {"a": 1, "ab": "x"})
    assert not accepts(sf, tmp_path, {"a": 1, "b": 2}), "an undeclared key was generated"


def test_spec_keys_lets_other_keys_follow(tmp_path):
    check(tmp_path, OBJ,
          [{"a": 1, "b": 2}, {"a": 1, "ab": "x", "abc": [1], "": None}, {"a": 1}],
          # a declared key's value is still checked, also when written after the others
          [{"a": "x", "b": 2}, {"a": 1, "b": 2, "ab": 3}, {"b": 2}])
    # no declared key a second time among the others
    rc, err, sf = compile_schema(tmp_path, OBJ, SPEC)
    inf = tmp_path / "dup.json"
    inf.write_text('{"a": 1, "b": 2, "a": "x"}')
    r = subprocess.run([CLI, "grammar", "--schema", str(sf), "--check", str(inf), "--spec-keys"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1, r.stderr


def test_spec_keys_keeps_explicit_false(tmp_path):
    check(tmp_path, dict(OBJ, additionalProperties=False), [{"a": 1}], [{"a": 1, "b": 2}])
