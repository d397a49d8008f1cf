"""``[comparison] as_written``: decision tables, the freezing pass, the ``AsWritten`` op, its
lowering and its overflow guards."""
