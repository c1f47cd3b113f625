"""Operations on the store. They add and flush inside the caller's transaction, never commit."""
