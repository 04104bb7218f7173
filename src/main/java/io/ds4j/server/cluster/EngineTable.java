package io.ds4j.server.cluster;

import io.vertx.core.json.JsonObject;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ThreadLocalRandom;

/**
 * A gateway's view of the engine nodes: the latest announcement of each, when it came, and how many requests this
 * gateway has in flight on it. Routing ({@link #pick}) considers only ready engines serving the requested model (any
 * ready engine when the request names none: each serves it with its own model, as a single server serves a request
 * without {@code model}); among them it prefers the session's own node (rendezvous hashing of the session key over the
 * candidates, so a conversation stays put while its node is up and moves only when that node goes) unless it is full,
 * else the one with the most free capacity. Not thread-safe: the gateway uses it on one event loop.
 */
final class EngineTable {
    /** One engine node as last announced. */
    static final class Engine {
        final String node;
        JsonObject ann;
        long seenNanos;
        /** Requests this gateway routed to the node that have not ended. */
        int inflight;
        long routed;

        Engine(String node) {
            this.node = node;
        }

        String name() {
            return ann.getString("name", node);
        }

        boolean ready() {
            return "ready".equals(ann.getString("status"));
        }

        String model() {
            JsonObject m = ann.getJsonObject("model");
            return m == null ? null : m.getString("id");
        }

        int maxActive() {
            return ann.getInteger("maxActive", 1);
        }

        int maxQueue() {
            return ann.getInteger("maxQueue", 0);
        }

        /** Requests on the node: as it last said, or as this gateway counts since, whichever is more. */
        int load() {
            return Math.max(ann.getInteger("running", 0) + ann.getInteger("waiting", 0), inflight);
        }

        boolean full() {
            return load() >= maxActive() + maxQueue();
        }
    }

    /**
     * Where a request goes.
     * @param engine     the chosen node, or null
     * @param status     0 when chosen; 503 when no engine serving the model is ready; 429 when every candidate is full;
     *                   404 when no engine serves the model, nor served it since this gateway started
     * @param message    why none was chosen
     * @param retryAfter seconds, for 429 and 503
     */
    record Choice(Engine engine, int status, String message, int retryAfter) {}

    private final Map<String, Engine> engines = new LinkedHashMap<>();
    /**
     * Models whose engines all went away, with what became of the last one: such a model is down for now, not unknown
     * (503, not 404), since a node that left is usually restarted. Kept for the gateway's lifetime.
     */
    private final Map<String, String> departed = new LinkedHashMap<>();
    /** Nodes that went away since the gateway started, and what became of the last one. */
    private int gone;
    private String lastGone;

    /** Records an announcement; returns true when the node is new. */
    boolean announce(JsonObject a, long now) {
        String node = a.getString("node");
        Engine e = engines.get(node);
        boolean fresh = e == null;
        if (fresh) engines.put(node, e = new Engine(node));
        e.ann = a;
        e.seenNanos = now;
        if (e.model() != null) departed.remove(e.model());
        return fresh;
    }

    Engine get(String node) {
        return engines.get(node);
    }

    /**
     * Forgets a node; its model, if no other known node serves it, is remembered as down.
     * @param why what became of it ("left the cluster"), for the 503 of a request for its model
     */
    Engine remove(String node, String why) {
        Engine e = engines.remove(node);
        if (e != null) {
            gone++;
            lastGone = "engine node '" + e.name() + "' " + why;
        }
        if (e != null && e.model() != null && engines.values().stream().noneMatch(o -> e.model().equals(o.model())))
            departed.put(e.model(), "engine node '" + e.name() + "' " + why);
        return e;
    }

    /** Nodes silent for longer than the timeout. */
    List<Engine> silent(long now, long timeoutNanos) {
        List<Engine> out = new ArrayList<>();
        for (Engine e : engines.values()) if (now - e.seenNanos > timeoutNanos) out.add(e);
        return out;
    }

    Collection<Engine> all() {
        return engines.values();
    }

    int ready() {
        int n = 0;
        for (Engine e : engines.values()) if (e.ready()) n++;
        return n;
    }

    /**
     * Chooses the node for a request.
     * @param model      the request's {@code model}, or null: then any ready node, each serving it with its own model
     * @param session    the session key, or null
     * @param exclude    nodes already tried for this request
     */
    Choice pick(String model, String session, Set<String> exclude) {
        List<Engine> cand = new ArrayList<>();
        for (Engine e : engines.values())
            if (e.ready() && !exclude.contains(e.node) && (model == null || model.equals(e.model()))) cand.add(e);
        if (cand.isEmpty()) return none(model, exclude);
        if (session != null) {
            Engine own = null;
            long best = Long.MIN_VALUE;
            for (Engine e : cand) {
                long w = weight(session, e.node);
                if (w > best) {
                    best = w;
                    own = e;
                }
            }
            if (own != null && !own.full()) return new Choice(own, 0, null, 0);
        }
        Engine pick = null;
        int bestFree = Integer.MIN_VALUE, ties = 0;
        for (Engine e : cand) {
            if (e.full()) continue;
            int free = e.maxActive() - e.load();
            if (free > bestFree) {
                bestFree = free;
                pick = e;
                ties = 1;
            } else if (free == bestFree && ThreadLocalRandom.current().nextInt(++ties) == 0) {
                pick = e; // a fair choice among equals (reservoir sampling)
            }
        }
        if (pick != null) return new Choice(pick, 0, null, 0);
        int retry = Integer.MAX_VALUE;
        for (Engine e : cand) retry = Math.min(retry, 1 + e.ann.getInteger("waiting", 0) / Math.max(1, e.maxActive()));
        return new Choice(null, 429, "every engine node is full: " + cand.size() + " node(s), each with "
                + "limits.maxActive running and limits.maxQueue waiting", Math.min(60, retry));
    }

    /** Why no node can take a request for model (null: any model), none being ready, or none serving it. */
    private Choice none(String model, Set<String> exclude) {
        String tried = exclude.isEmpty() ? "" : ", " + exclude.size() + " already failed this request";
        if (model == null || engines.isEmpty() && departed.isEmpty()) {
            String m = engines.isEmpty() && gone == 0 ? "no engine node has joined the cluster"
                    : engines.isEmpty() ? "no engine node is in the cluster: the " + gone + " that joined since this gateway started"
                    + " went away (the last, " + lastGone + ")"
                    : "no engine node is ready (" + engines.size() + " known, " + ready() + " ready" + tried + ")";
            return new Choice(null, 503, m, 5);
        }
        List<String> serving = new ArrayList<>();
        int unknown = 0;
        for (Engine e : engines.values()) {
            if (model.equals(e.model())) serving.add("'" + e.name() + "' " + (exclude.contains(e.node) ? "already failed this request" : e.ann.getString("status")));
            else if (e.model() == null && "loading".equals(e.ann.getString("status"))) unknown++;
        }
        String q = "'" + model + "'";
        if (!serving.isEmpty())
            return new Choice(null, 503, "no engine node serving " + q + " is ready: " + String.join(", ", serving), 5);
        if (departed.containsKey(model))
            return new Choice(null, 503, "no engine node serving " + q + " is in the cluster now (" + departed.get(model) + ")", 5);
        if (unknown > 0)
            return new Choice(null, 503, "no ready engine node serves " + q + "; " + unknown + " engine node(s) still loading,"
                    + " whose model is not known until they are ready", 5);
        return new Choice(null, 404, "model: " + q + " does not exist; this cluster serves " + served(), 0);
    }

    /** Whether a known node serves model. */
    boolean serves(String model) {
        for (Engine e : engines.values()) if (model.equals(e.model())) return true;
        return false;
    }

    /** The models the known nodes serve, quoted, in order of their names. */
    String served() {
        java.util.SortedSet<String> ids = new java.util.TreeSet<>();
        for (Engine e : engines.values()) if (e.model() != null) ids.add("'" + e.model() + "'");
        for (String m : departed.keySet()) ids.add("'" + m + "' (its engine nodes are gone for now)");
        return ids.isEmpty() ? "no model yet" : String.join(", ", ids);
    }

    /** Rendezvous weight of a session on a node (64-bit FNV-1a of both). */
    static long weight(String session, String node) {
        long h = 0xcbf29ce484222325L;
        for (byte b : (session + "\u0000" + node).getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xff;
            h *= 0x100000001b3L;
        }
        return h ^ (h >>> 29);
    }
}
