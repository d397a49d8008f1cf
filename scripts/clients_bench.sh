#!/usr/bin/env bash
# Benchmark the client models (clients/models/: pymc-marketing's MMM, pymc-extras'
# statespace) with the catalogue benchmark's runner, in .venv-clients
# (scripts/clients_env.sh; docs/clients.md).
#
#   bash scripts/clients_bench.sh                       # 3 rounds, stock vs policy default vs JAX
#   bash scripts/clients_bench.sh --rounds 1 --json clients.json
#   bash scripts/clients_bench.sh --models statespace_structural --nutpie
#
# clients/ has the catalogue's layout (models/NAME.py with build_model(), and
# models/_benchmark.py's build_logp_fn), so every catalogue option applies: each
# (model, backend) in fresh processes, a cold compile on an empty numba cache, warm
# compiles and per-call timing in later processes on that cache, backend order rotated
# each round, agreement with the C backend. Later arguments override the defaults here.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${CLIENTS_VENV:-.venv-clients}/bin/python
if [ ! -x "$py" ]; then
    echo "clients_bench.sh: no $py; run scripts/clients_env.sh first" >&2
    exit 2
fi
exec "$py" -m ptnumba_codegen bench --group catalogue --catalogue clients --models all \
    --backends stock_fast,policy_default,jax "$@"
