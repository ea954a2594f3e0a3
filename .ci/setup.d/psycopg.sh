# The Python form of the fenced-postgres recipe (examples/fenced_postgres.py)
# writes with psycopg 3 (PyPI, binary wheels: libpq included). It goes into
# a virtual environment in the target directory, where
# examples/tests/fenced_postgres.rs looks for it; the tests install nothing.
examples_venv="${CARGO_TARGET_DIR:-target}/python-venv"
if ! "$examples_venv/bin/python3" -c 'import psycopg' 2>/dev/null; then
    python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt python3-venv
    python3 -m venv "$examples_venv"
    echo "setup: installing psycopg into $examples_venv"
    "$examples_venv/bin/python3" -m pip install --quiet --disable-pip-version-check 'psycopg[binary]>=3.2,<4'
fi
unset examples_venv
