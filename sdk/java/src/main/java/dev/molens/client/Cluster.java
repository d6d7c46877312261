package dev.molens.client;

import com.fasterxml.jackson.annotation.JsonAnySetter;
import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The answers of the cluster, statistics and meta endpoints. */
public final class Cluster {
    private Cluster() {}

    /** GET /api/v1/cluster/leader. */
    public static final class LeaderInfo {
        public String leaderId;
        /** The leader's HTTP base URL (null on the leader itself). */
        public String leaderUrl;
        public long term;
        /** The answering node's role. */
        public String role;
    }

    /** One member in {@link Status}. */
    public static final class Node {
        public String id;
        public String role;
        public String suffrage;
        public String httpUrl;
        public Long matchIndex;
        public Long lastContactMs;
    }

    /** GET /api/v1/cluster/status: the answering node's view of the cluster. */
    public static final class Status {
        public String nodeId;
        public String role;
        public long term;
        public String leaderId;
        public String leaderUrl;
        public long commitIndex;
        public long appliedIndex;
        public List<Node> nodes = new ArrayList<Node>();
    }

    /** GET /api/v1/stats (one node); keys not typed here are in {@link #other}. */
    public static final class Stats {
        public String nodeId;
        public String role;
        public String leaderId;
        public long term;
        public Map<String, Long> tasks;
        public long tasksTotal;
        public long timeMs;
        public Long commitIndex;
        public long appliedIndex;
        public double firesPerS;
        public Double successRate;
        public long windowMs;
        public Map<String, Long> byResult;
        public long firesTotal;
        public Double latenessP99Ms;
        public double qps;
        public Long rssBytes;
        public Map<String, Long> disk;
        public JsonNode cleanup;
        /** In {@link ClusterStats} entries: highest commit index seen minus applied_index. */
        public Long lag;
        public String httpUrl;
        /** In {@link ClusterStats} entries: set when the member did not answer. */
        public String error;
        public Map<String, JsonNode> other = new LinkedHashMap<String, JsonNode>();

        @JsonAnySetter
        void put(String key, JsonNode value) { other.put(key, value); }
    }

    /** GET /api/v1/cluster/stats: every member's stats, leader first. */
    public static final class ClusterStats {
        public long timeMs;
        public List<Stats> nodes = new ArrayList<Stats>();
    }

    /** GET /api/v1/schedule/preview. */
    public static final class SchedulePreview {
        /** Fire times, epoch ms. */
        public List<Long> items;
        /** The same instants in {@link #timezone}, ISO 8601. */
        public List<String> local;
        public String timezone;
        public long after;
    }

    public static final class TrendPoint {
        public long bucketMs;
        public long count;
        public long p50Ms;
        public long p90Ms;
        public long p99Ms;
    }

    public static final class UrlStats {
        public String url;
        public long count;
        public long p50Ms;
        public long p90Ms;
        public long p99Ms;
        public List<TrendPoint> trend;
    }

    /** GET /api/v1/stats/urls. */
    public static final class UrlStatsList {
        public long since;
        public long until;
        public long bucketMs;
        public List<UrlStats> items;
    }

    public static final class WheelLevel {
        public int level;
        public long startMs;
        public long spanMs;
        public long total;
        public List<Long> counts;
    }

    /** GET /api/v1/timewheel/distribution. */
    public static final class WheelDistribution {
        public long timeMs;
        public long tickMs;
        public int wheelSize;
        public long timers;
        public long overflow;
        public List<WheelLevel> levels;
    }

    /** GET /healthz. */
    public static final class Health {
        public boolean ok;
        public String nodeId;
    }

    /** GET /readyz. */
    public static final class Ready {
        public boolean ready;
        public String nodeId;
        public String role;
        public String leaderId;
    }
}
