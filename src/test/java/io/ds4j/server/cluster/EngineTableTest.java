package io.ds4j.server.cluster;

import io.vertx.core.json.JsonObject;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.Map;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.*;

/** How a gateway chooses an engine node. */
class EngineTableTest {
    static JsonObject ann(String node, String status, String model, int running, int waiting, int maxActive, int maxQueue) {
        JsonObject a = new JsonObject().put("node", node).put("name", "engine-" + node).put("status", status)
                .put("running", running).put("waiting", waiting).put("maxActive", maxActive).put("maxQueue", maxQueue);
        if (model != null) a.put("model", new JsonObject().put("id", model));
        return a;
    }

    @Test
    void mostFreeCapacityWins() {
        EngineTable t = new EngineTable();
        t.announce(ann("a", "ready", "m", 6, 0, 8, 4), 0);
        t.announce(ann("b", "ready", "m", 2, 0, 8, 4), 0);
        assertEquals("b", t.pick("m", null, Set.of()).engine().node);
        // the gateway's own count of requests in flight counts when the node has not said so yet
        t.get("b").inflight = 7;
        assertEquals("a", t.pick("m", null, Set.of()).engine().node);
    }

    @Test
    void requestsSpreadEvenlyBetweenEqualNodes() {
        EngineTable t = new EngineTable();
        t.announce(ann("a", "ready", "m", 0, 0, 8, 64), 0);
        t.announce(ann("b", "ready", "m", 0, 0, 8, 64), 0);
        Map<String, Integer> n = new HashMap<>();
        for (int i = 0; i < 32; i++) {
            EngineTable.Engine e = t.pick("m", null, Set.of()).engine();
            e.inflight++;
            n.merge(e.node, 1, Integer::sum);
        }
        assertEquals(16, n.get("a"));
        assertEquals(16, n.get("b"));
    }

    @Test
    void aSessionStaysOnItsNodeUntilItIsFull() {
        EngineTable t = new EngineTable();
        for (String node : new String[]{"a", "b", "c"}) t.announce(ann(node, "ready", "m", 0, 0, 2, 1), 0);
        Map<String, String> home = new HashMap<>();
        for (int s = 0; s < 30; s++) home.put("user-" + s, t.pick("m", "user-" + s, Set.of()).engine().node);
        assertTrue(new java.util.HashSet<>(home.values()).size() > 1, "sessions are spread over nodes: " + home);
        for (int round = 0; round < 3; round++)
            for (var e : home.entrySet()) assertEquals(e.getValue(), t.pick("m", e.getKey(), Set.of()).engine().node);
        // its node fills up: the session goes where there is room; when it frees, the session comes back
        String user = "user-0", own = home.get(user);
        t.get(own).inflight = 3;
        assertNotEquals(own, t.pick("m", user, Set.of()).engine().node);
        t.get(own).inflight = 0;
        assertEquals(own, t.pick("m", user, Set.of()).engine().node);
        // its node goes away: the others keep their homes
        t.remove(own, "left the cluster");
        for (var e : home.entrySet())
            if (!e.getValue().equals(own)) assertEquals(e.getValue(), t.pick("m", e.getKey(), Set.of()).engine().node);
    }

    @Test
    void onlyReadyNodesServingTheModelAreChosen() {
        EngineTable t = new EngineTable();
        t.announce(ann("loading", "loading", null, 0, 0, 8, 8), 0);
        t.announce(ann("other", "ready", "other-model", 0, 0, 8, 8), 0);
        t.announce(ann("m1", "ready", "m", 7, 0, 8, 8), 0);
        for (int i = 0; i < 10; i++) assertEquals("m1", t.pick("m", null, Set.of()).engine().node);
        // no model named: any ready node, which serves it with its own model
        assertNotEquals("loading", t.pick(null, null, Set.of()).engine().node);
        // m's only node failed the request: never another model's node, which could only answer 404
        EngineTable.Choice tried = t.pick("m", null, Set.of("m1"));
        assertNull(tried.engine());
        assertEquals(503, tried.status());
        assertEquals("no engine node serving 'm' is ready: 'engine-m1' already failed this request", tried.message());
        // a model no node serves, while one still loads (its model unknown until it is ready): 503 for now
        EngineTable.Choice loading = t.pick("nope", null, Set.of());
        assertEquals(503, loading.status(), loading.message());
        assertTrue(loading.message().contains("1 engine node(s) still loading"), loading.message());
        t.remove("loading", "left the cluster");
        EngineTable.Choice unknown = t.pick("nope", null, Set.of());
        assertEquals(404, unknown.status());
        assertEquals("model: 'nope' does not exist; this cluster serves 'm', 'other-model'", unknown.message());
        // m's node goes: m is down for now, not unknown
        t.remove("m1", "left the cluster");
        EngineTable.Choice down = t.pick("m", null, Set.of());
        assertEquals(503, down.status());
        assertEquals("no engine node serving 'm' is in the cluster now (engine node 'engine-m1' left the cluster)", down.message());
        t.announce(ann("m2", "draining", "m", 0, 0, 8, 8), 0);
        assertEquals("no engine node serving 'm' is ready: 'engine-m2' draining", t.pick("m", null, Set.of()).message());
        t.announce(ann("m2", "ready", "m", 0, 0, 8, 8), 0);
        assertEquals("m2", t.pick("m", null, Set.of()).engine().node);
    }

    @Test
    void fullEverywhereIs429AndNothingReadyIs503() {
        EngineTable t = new EngineTable();
        EngineTable.Choice none = t.pick("m", null, Set.of());
        assertNull(none.engine());
        assertEquals(503, none.status());
        assertTrue(none.message().contains("no engine node"), none.message());
        t.announce(ann("a", "ready", "m", 2, 1, 2, 1), 0);
        t.announce(ann("b", "ready", "m", 1, 0, 2, 1), 0);
        t.get("b").inflight = 3;
        EngineTable.Choice full = t.pick("m", null, Set.of());
        assertNull(full.engine());
        assertEquals(429, full.status());
        assertTrue(full.retryAfter() >= 1);
        t.get("b").inflight = 2;
        assertEquals("b", t.pick("m", null, Set.of()).engine().node, "one free queue place is enough");
        EngineTable.Choice tried = t.pick("m", null, Set.of("a", "b"));
        assertEquals(503, tried.status());
        assertTrue(tried.message().contains("already failed"), tried.message());
    }

    @Test
    void withEveryNodeGoneThe503SaysTheyLeftNotThatNoneJoined() {
        EngineTable t = new EngineTable();
        assertEquals("no engine node has joined the cluster", t.pick(null, null, Set.of()).message());
        t.announce(ann("a", "ready", "m", 0, 0, 8, 8), 0);
        t.announce(ann("b", "ready", "m", 0, 0, 8, 8), 0);
        t.remove("a", "left the cluster");
        t.remove("b", "stopped announcing itself for 4000 ms (cluster.engineTimeoutMs)");
        EngineTable.Choice none = t.pick(null, null, Set.of());
        assertEquals(503, none.status());
        assertEquals("no engine node is in the cluster: the 2 that joined since this gateway started went away (the last, engine"
                + " node 'engine-b' stopped announcing itself for 4000 ms (cluster.engineTimeoutMs))", none.message());
    }

    @Test
    void silentNodesAreFound() {
        EngineTable t = new EngineTable();
        t.announce(ann("a", "ready", "m", 0, 0, 8, 8), 1_000);
        t.announce(ann("b", "ready", "m", 0, 0, 8, 8), 5_000);
        assertEquals(java.util.List.of("a"), t.silent(6_000, 3_000).stream().map(e -> e.node).toList());
    }
}
