"""Event core: integer-microsecond clock, the event heap and partitioned RNG streams."""
