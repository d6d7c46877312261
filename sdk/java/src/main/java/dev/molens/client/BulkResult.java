package dev.molens.client;

import java.util.ArrayList;
import java.util.List;

/** The answer of {@link MolensClient#redriveDeadLetters} and {@link MolensClient#deleteDeadLetters}. */
public final class BulkResult {
    public int matched;
    public int redriven;
    public int deleted;
    public int errorCount;
    /** The first 100 dead letters the request could not act on. */
    public List<ItemError> errors = new ArrayList<ItemError>();
    /** More dead letters match, or the request was {@link #interrupted}: send it again for them. */
    public boolean more;
    /**
     * Why the request stopped part-way (a leader change, or the node stopping), null otherwise: the
     * counts are what applied; send it again for the rest.
     */
    public Interruption interrupted;
    /** Redriven at_most_once occurrences (with {@link #warning}). */
    public int atMostOnce;
    public String warning;

    /** Why a bulk request stopped part-way: the API error's code and message. */
    public static final class Interruption {
        public String code;
        public String message;
    }

    /** One dead letter a bulk request could not act on. */
    public static final class ItemError {
        public String id;
        /** The API error code ({@code not_found}: gone meanwhile). */
        public String error;
        public String message;
    }
}
