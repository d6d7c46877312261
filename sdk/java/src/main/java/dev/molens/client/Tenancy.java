package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonValue;

import java.util.List;
import java.util.regex.Pattern;

/** Namespaces and API keys as the API shows them (docs/api.md#namespaces-and-keys). */
public final class Tenancy {
    private static final Pattern NAME = Pattern.compile("[a-z0-9][a-z0-9_-]{0,62}");

    private Tenancy() {}

    /** {@code value} if it is a namespace name; else IllegalArgumentException before any request. */
    static String checkedName(String what, String value) {
        if (value == null || !NAME.matcher(value).matches()) {
            throw new IllegalArgumentException(what + " must match [a-z0-9][a-z0-9_-]{0,62}, got " + value);
        }
        return value;
    }

    /** What an API key may do. */
    public enum Role {
        /** Everything: tasks, flows, dead letters, namespaces, keys, cluster membership. */
        ADMIN("admin"),
        /**
         * Create and change tasks, dead letters and the own flows ({@code <namespace>~<flow_key>}) of its namespaces,
         * and read them.
         */
        WRITER("writer"),
        /** Read tasks, executions, dead letters and the own flows of its namespaces. */
        READER("reader");

        private final String wire;

        Role(String wire) { this.wire = wire; }

        /** The value as the API spells it. */
        @JsonValue
        public String wire() { return wire; }

        @Override
        public String toString() { return wire; }
    }

    /** A namespace's quotas; null is unlimited. */
    public static final class Quotas {
        public Long maxPendingTasks;
        public Double createsPerS;
        public Long maxPayloadBytes;
        /** Fires per second of all the namespace's tasks, evenly spaced; due fires over it wait, they are not refused. */
        public Double firesPerS;

        public Quotas setMaxPendingTasks(Long v) { maxPendingTasks = v; return this; }
        public Quotas setCreatesPerS(Double v) { createsPerS = v; return this; }
        public Quotas setMaxPayloadBytes(Long v) { maxPayloadBytes = v; return this; }
        public Quotas setFiresPerS(Double v) { firesPerS = v; return this; }
    }

    /** A namespace: it groups tasks, their executions and dead letters. */
    public static final class Namespace {
        public String name;
        public Quotas quotas;
        public long createdAt;
        public long updatedAt;
    }

    /** An API key; {@link #secret} is set only in {@link MolensClient#createApiKey}'s answer. */
    public static final class ApiKey {
        public String id;
        public String name;
        /** null only for a value this SDK does not know (a newer server's). */
        public Role role;
        /** Names, or {@code ["*"]}: every namespace, present and future. */
        public List<String> namespaces;
        public long createdAt;
        /** When the answering node last admitted it (null: not since it started). */
        public Long lastUsedAt;
        public String secret;
    }
}
