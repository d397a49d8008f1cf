"""Graph passes: the ``policy_codegen`` pass and the constant-write folding it runs."""
