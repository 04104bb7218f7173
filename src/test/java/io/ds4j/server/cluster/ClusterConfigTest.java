package io.ds4j.server.cluster;

import com.hazelcast.config.Config;
import com.hazelcast.config.JoinConfig;
import io.ds4j.server.config.ConfigException;
import io.ds4j.server.config.ServerConfig;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.*;

/** The cluster.* keys and the Hazelcast configuration they make. */
class ClusterConfigTest {
    @Test
    void defaultsStayOnLoopbackWithNoCluster() throws Exception {
        ServerConfig.Cluster c = ServerConfig.parse(null, "defaults", null).cluster();
        assertFalse(c.enabled(), "no cluster unless asked for");
        assertEquals("127.0.0.1", c.host());
        assertEquals("both", c.role());
        assertTrue(c.gateway() && c.engine());
    }

    @Test
    void badValuesAreNamedByKey() {
        ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parse(
                "{\"cluster\": {\"role\": \"router\", \"port\": 70000, \"members\": [\"10.0.0.1:5701\", \"bad host\"],"
                        + " \"name\": \" \"}}", "f", null));
        String all = String.join("\n", e.problems());
        assertTrue(all.contains("cluster.role: must be gateway, engine or both"), all);
        assertTrue(all.contains("cluster.port: must be an integer in [0, 65535]"), all);
        assertTrue(all.contains("cluster.members: \"bad host\" is not host or host:port"), all);
        assertFalse(all.contains("10.0.0.1:5701"), all);
        assertTrue(all.contains("cluster.name: must not be empty"), all);
        ConfigException t = assertThrows(ConfigException.class, () -> ServerConfig.parse(null, "f",
                Map.of("cluster.announceMs", 1000, "cluster.engineTimeoutMs", 1500)));
        assertTrue(t.getMessage().contains("cluster.engineTimeoutMs: must be at least twice cluster.announceMs"), t.getMessage());
    }

    @Test
    void aMemberPortOutsideTheTcpRangeIsNamed() {
        // five digits pass the host:port pattern; Hazelcast's join threw on 99999 (a stack trace, the member
        // never tried)
        ConfigException e = assertThrows(ConfigException.class, () -> ServerConfig.parse(null, "f", Map.of(
                "cluster.members",
                List.of("127.0.0.1:99999", "10.0.0.1:0", "[::1]:65536", "[::1]", "10.0.0.2:65535"))));
        String all = String.join("\n", e.problems());
        for (String[] bad : new String[][] {{"127.0.0.1:99999", "99999"}, {"10.0.0.1:0", "0"}, {"[::1]:65536", "65536"}})
            assertTrue(all.contains("cluster.members: \"" + bad[0] + "\" has port " + bad[1] + ", outside [1, 65535]"), all);
        assertFalse(all.contains("\"[::1]\""), all);
        assertFalse(all.contains("10.0.0.2:65535"), all);
    }

    @Test
    void hazelcastJoinsByTcpOnTheClusterHostOnly() throws Exception {
        ServerConfig.Cluster c = ServerConfig.parse(null, "f", Map.of("cluster.enabled", true, "cluster.name", "prod",
                "cluster.port", 5801, "cluster.members", List.of("127.0.0.1:5802", "127.0.0.1"))).cluster();
        Config hz = ClusterSupport.hazelcastConfig(c);
        assertEquals("prod", hz.getClusterName());
        JoinConfig join = hz.getNetworkConfig().getJoin();
        assertFalse(join.getMulticastConfig().isEnabled(), "never multicast");
        assertFalse(join.getAutoDetectionConfig().isEnabled());
        assertTrue(join.getTcpIpConfig().isEnabled());
        assertEquals(List.of("127.0.0.1:5802", "127.0.0.1:5701"), join.getTcpIpConfig().getMembers());
        assertEquals(5801, hz.getNetworkConfig().getPort());
        assertFalse(hz.getNetworkConfig().isPortAutoIncrement());
        assertTrue(hz.getNetworkConfig().getInterfaces().isEnabled());
        assertEquals(List.of("127.0.0.1"), List.copyOf(hz.getNetworkConfig().getInterfaces().getInterfaces()));
        assertEquals("false", hz.getProperty("hazelcast.socket.bind.any"), "binds to cluster.host, not to every interface");
    }
}
