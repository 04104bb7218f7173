package io.ds4j.server.cluster;

import com.hazelcast.cluster.MembershipEvent;
import com.hazelcast.cluster.MembershipListener;
import com.hazelcast.config.Config;
import com.hazelcast.config.JoinConfig;
import com.hazelcast.config.MapConfig;
import com.hazelcast.config.MultiMapConfig;
import com.hazelcast.config.NetworkConfig;
import io.ds4j.server.config.ServerConfig;
import io.vertx.core.Vertx;
import io.vertx.spi.cluster.hazelcast.HazelcastClusterManager;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Consumer;

/**
 * The Hazelcast side of a cluster node: a cluster manager configured from {@code cluster.*} — TCP/IP join with the
 * listed members only (multicast and auto-detection off), bound to {@code cluster.host} only, failure detection in
 * seconds rather than Hazelcast's default minute — and the membership events ds4j acts on.
 */
public final class ClusterSupport {
    private static final Logger LOG = LoggerFactory.getLogger(ClusterSupport.class);
    /** Hazelcast's default member port, used for members given without one. */
    static final int DEFAULT_PORT = 5701;
    /** The member attribute holding a member's Vert.x node id. */
    private static final String VERTX_NODE_ID = "__vertx.nodeId";

    private final HazelcastClusterManager manager;
    private final List<Consumer<String>> left = new CopyOnWriteArrayList<>();

    private ClusterSupport(HazelcastClusterManager manager) {
        this.manager = manager;
    }

    /** A cluster manager for the {@code cluster.*} settings; nothing starts until Vert.x joins with it. */
    public static ClusterSupport create(ServerConfig.Cluster c) {
        // read by Hazelcast's first log line, before its configuration is
        System.setProperty("hazelcast.logging.type", "slf4j");
        return new ClusterSupport(new HazelcastClusterManager(hazelcastConfig(c)));
    }

    /** The Hazelcast configuration of a node: see the class comment. */
    static Config hazelcastConfig(ServerConfig.Cluster c) {
        Config hz = new Config();
        hz.setClusterName(c.name());
        hz.setProperty("hazelcast.logging.type", "slf4j");
        hz.setProperty("hazelcast.phone.home.enabled", "false");
        // the JVM's shutdown hook of ds4j closes Vert.x, which leaves the cluster in order
        hz.setProperty("hazelcast.shutdownhook.enabled", "false");
        // a dead member is noticed in seconds (default: 60 s without heartbeat)
        hz.setProperty("hazelcast.heartbeat.interval.seconds", "1");
        hz.setProperty("hazelcast.max.no.heartbeat.seconds", "5");
        // joining needs no settling time with an explicit member list
        hz.setProperty("hazelcast.wait.seconds.before.join", "0");
        hz.setProperty("hazelcast.max.wait.seconds.before.join", "1");
        hz.setProperty("hazelcast.merge.first.run.delay.seconds", "5");
        hz.setProperty("hazelcast.merge.next.run.delay.seconds", "5");
        hz.setProperty("hazelcast.socket.bind.any", "false");
        // a small cluster of a few nodes: fewer partitions start faster and use less memory
        hz.setProperty("hazelcast.partition.count", "31");
        hz.setProperty("hazelcast.jmx", "false");
        NetworkConfig net = hz.getNetworkConfig();
        net.setPort(c.port() == 0 ? freePort(c.host()) : c.port()).setPortAutoIncrement(false);
        net.setPublicAddress(c.host() + ":" + net.getPort());
        net.getInterfaces().setEnabled(true).addInterface(c.host());
        net.getRestApiConfig().setEnabled(false);
        JoinConfig join = net.getJoin();
        join.getMulticastConfig().setEnabled(false);
        join.getAutoDetectionConfig().setEnabled(false);
        join.getTcpIpConfig().setEnabled(true).setConnectionTimeoutSeconds(2);
        for (String m : c.members()) join.getTcpIpConfig().addMember(m.contains(":") || m.startsWith("[") ? m : m + ":" + DEFAULT_PORT);
        // what vertx-hazelcast's default configuration declares for its own structures
        hz.addMultiMapConfig(new MultiMapConfig("__vertx.subs").setBackupCount(1).setValueCollectionType(MultiMapConfig.ValueCollectionType.SET));
        hz.addMapConfig(new MapConfig("__vertx.haInfo").setBackupCount(1));
        hz.addMapConfig(new MapConfig("__vertx.nodeInfo").setBackupCount(1));
        return hz;
    }

    private static int freePort(String host) {
        try (var s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getByName(host))) {
            return s.getLocalPort();
        } catch (java.io.IOException e) {
            throw new IllegalStateException("cluster.host " + host + ": cannot bind: " + e.getMessage(), e);
        }
    }

    public HazelcastClusterManager manager() {
        return manager;
    }

    /** This member's id (the Vert.x node id); valid once Vert.x joined. */
    public String nodeId() {
        return manager.getNodeId();
    }

    /** The member ids of the cluster, this one included. */
    public List<String> members() {
        return manager.getNodes();
    }

    /** The address:port this member listens on for cluster traffic. */
    public String memberAddress() {
        var a = manager.getHazelcastInstance().getCluster().getLocalMember().getAddress();
        return a.getHost() + ":" + a.getPort();
    }

    /** Calls {@code onLeft} with the node id of every member that leaves (or is declared dead); call after the join. */
    public void onMemberLeft(Consumer<String> onLeft) {
        if (left.isEmpty()) {
            manager.getHazelcastInstance().getCluster().addMembershipListener(new MembershipListener() {
                @Override
                public void memberAdded(MembershipEvent e) {
                    LOG.info("cluster: member {} joined ({} members)", e.getMember().getAddress(), e.getMembers().size());
                }

                @Override
                public void memberRemoved(MembershipEvent e) {
                    LOG.warn("cluster: member {} left ({} members)", e.getMember().getAddress(), e.getMembers().size());
                    // vertx-hazelcast names a node by a member attribute of its own, not by the member's UUID
                    String node = e.getMember().getAttribute(VERTX_NODE_ID);
                    for (Consumer<String> l : left) l.accept(node != null ? node : e.getMember().getUuid().toString());
                }
            });
        }
        left.add(onLeft);
    }

    /** Registers the frame codec on a clustered Vert.x instance (once per instance). */
    public static void registerCodec(Vertx vertx) {
        vertx.eventBus().registerDefaultCodec(ClusterFrame.class, new ClusterFrameCodec());
    }

    /**
     * This host's boot id (Linux), or null: two nodes with the same one share a monotonic clock, so the gateway may
     * subtract an engine node's {@code System.nanoTime()} from its own.
     */
    static String bootId() {
        try {
            return Files.readString(Path.of("/proc/sys/kernel/random/boot_id")).trim();
        } catch (Exception e) {
            return null;
        }
    }
}
