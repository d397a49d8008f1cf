"""Graph passes: the ``policy_codegen`` pass, the constant-write folding it runs, and what a pass compiles when its own work raises (`pass_errors`)."""
