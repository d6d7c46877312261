package dev.molens.client;

import java.util.ArrayList;
import java.util.List;

/** One page of a list: pass {@link #nextCursor} back as the cursor until it is null. */
public final class Page<T> {
    public List<T> items = new ArrayList<T>();
    public String nextCursor;
}
