package io.ds4j.server.cluster;

import io.ds4j.server.Ds4jServer;
import io.ds4j.server.LogEscaping;
import io.ds4j.server.LogLevels;
import io.ds4j.server.ModelProvider;
import io.ds4j.server.config.ConfigException;
import io.ds4j.server.config.ServerConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import io.vertx.core.DeploymentOptions;
import io.vertx.core.Future;
import io.vertx.core.Promise;
import io.vertx.core.Vertx;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * One process of a ds4j cluster ({@code serve --cluster}), by {@code cluster.role}:
 * <ul>
 *   <li>{@code engine}: a full {@link Ds4jServer} (its own API on server.host:server.port, config watching) on a
 *       clustered Vert.x, plus an {@link EngineNode} that announces it and serves what gateways route to it;</li>
 *   <li>{@code gateway}: a clustered Vert.x with a {@link GatewayVerticle} on server.host:server.port, no model;</li>
 *   <li>{@code both}: an engine whose own API listens on a free loopback port, and a gateway on server.host:server.port
 *       in the same Vert.x instance (one cluster member).</li>
 * </ul>
 */
public final class ClusterNode {
    private static final Logger LOG = LoggerFactory.getLogger(ClusterNode.class);

    private final ClusterSupport cluster;
    private Ds4jServer engine;
    private Vertx gatewayVertx;
    private PrometheusMeterRegistry gatewayRegistry;
    private GatewayVerticle gateway;
    /** A gateway's server.shutdownGraceSeconds, read at its start (a gateway does not reload its configuration). */
    private int shutdownGraceSeconds;

    private ClusterNode(ClusterSupport cluster) {
        this.cluster = cluster;
    }

    /**
     * Joins the cluster and starts this process's role. Completes once HTTP listens (an engine may still be loading
     * its model: see {@link #ready()}); fails with a {@link Ds4jServer.StartException} naming what could not start.
     */
    public static Future<ClusterNode> start(ServerConfig cfg, Path configFile, Map<String, Object> overrides, ModelProvider provider) {
        // a gateway logs what clients send too, and at its configured level, and it does not go through Ds4jServer.start
        LogEscaping.install();
        LogLevels.apply(cfg.logLevel());
        ServerConfig.Cluster c = cfg.cluster();
        ClusterNode n;
        try {
            n = new ClusterNode(ClusterSupport.create(c));
        } catch (RuntimeException e) {
            return Future.failedFuture(new Ds4jServer.StartException(e.getMessage(), e));
        }
        LOG.info("cluster: joining '{}' as {} on {}:{} (members {}; multicast off)", c.name(), c.role(), c.host(),
                c.port(), c.members().isEmpty() ? "none: waiting to be joined" : c.members());
        if (!c.engine()) return n.startGateway(cfg);
        ServerConfig engineCfg = cfg;
        Map<String, Object> engineOv = overrides;
        if (c.gateway()) {
            // both: the gateway takes server.host:server.port; the engine's own API moves to a free loopback port
            engineOv = new LinkedHashMap<>(overrides);
            engineOv.put("server.host", "127.0.0.1");
            engineOv.put("server.port", 0);
            try {
                engineCfg = cfg.with("server.host", "127.0.0.1").with("server.port", 0);
            } catch (ConfigException e) {
                return Future.failedFuture(new IllegalStateException(e));
            }
        }
        ServerConfig ecfg = engineCfg;
        return Ds4jServer.start(new Ds4jServer.Options(engineCfg, configFile, engineOv, provider, n.cluster.manager()))
                .compose(s -> {
                    n.engine = s;
                    ClusterSupport.registerCodec(s.vertx());
                    String name = c.role().equals("both") ? "engine@" + c.host() + ":" + n.cluster.memberAddress().replaceFirst(".*:", "")
                            : "engine@" + ecfg.host() + ":" + s.port();
                    Future<String> f = s.vertx().deployVerticle(new EngineNode(s.state(), n.cluster, name));
                    if (c.gateway()) {
                        // the engine's server has warned of a missing folder already
                        n.gateway = new GatewayVerticle(() -> cfg, n.cluster, s.registry(),
                                Ds4jServer.resolveWebroot(cfg.webroot()));
                        f = f.compose(id -> s.vertx().deployVerticle(n.gateway, new DeploymentOptions()));
                    }
                    return f.map(n).recover(e -> s.close().transform(x -> Future.failedFuture(
                            new Ds4jServer.StartException("cannot start the cluster node: " + e.getMessage(), e))));
                });
    }

    /** server.webroot resolved as a single node resolves it, a missing folder warned of as a single node warns. */
    private static String resolveWebroot(String w) {
        String resolved = Ds4jServer.resolveWebroot(w);
        String problem = Ds4jServer.webrootProblem(resolved);
        if (problem != null) LOG.warn("{}", problem);
        return resolved;
    }

    private Future<ClusterNode> startGateway(ServerConfig cfg) {
        shutdownGraceSeconds = cfg.shutdownGraceSeconds();
        gatewayRegistry = Ds4jServer.newRegistry();
        Promise<ClusterNode> result = Promise.promise();
        ServerConfig.Cluster c = cfg.cluster();
        Ds4jServer.vertxBuilder(gatewayRegistry, cfg, cluster.manager()).buildClustered().onComplete(ar -> {
            if (ar.failed()) {
                gatewayRegistry.close();
                result.fail(new Ds4jServer.StartException("cannot join cluster '" + c.name() + "' on " + c.host() + ":" + c.port()
                        + ": " + ar.cause().getMessage(), ar.cause()));
                return;
            }
            gatewayVertx = ar.result();
            ClusterSupport.registerCodec(gatewayVertx);
            gateway = new GatewayVerticle(() -> cfg, cluster, gatewayRegistry, resolveWebroot(cfg.webroot()));
            // as a single node warns (a gateway with an engine has its engine's server say it)
            String repeated = cfg.repeatedApiKeys();
            if (repeated != null) LOG.warn("{}", repeated);
            gatewayVertx.deployVerticle(gateway).onComplete(d -> {
                if (d.succeeded()) {
                    result.complete(this);
                } else {
                    Thread.ofPlatform().daemon().start(() -> {
                        try {
                            close().await();
                        } catch (Exception ignored) {
                            // the start failure is what matters
                        }
                        result.fail(new Ds4jServer.StartException("cannot listen on " + cfg.host() + ":" + cfg.port() + ": "
                                + d.cause().getMessage(), d.cause()));
                    });
                }
            });
        });
        return result.future();
    }

    /** Completes when this node can serve: the model is loaded (engine roles) or at once (gateway). */
    public Future<Void> ready() {
        return engine != null ? engine.ready() : Future.succeededFuture();
    }

    /** The port clients use: the gateway's, else the engine's API. */
    public int port() {
        return gateway != null ? gateway.actualPort() : engine.port();
    }

    /** The engine server of an engine or both node, else null. */
    public Ds4jServer engine() {
        return engine;
    }

    public ClusterSupport cluster() {
        return cluster;
    }

    /**
     * Leaves the cluster and stops everything this node started, gracefully: an engine node as a single server does
     * ({@link Ds4jServer#close}, which its gateway part, if any, relays through), a gateway by draining what it relays
     * first ({@link GatewayVerticle#drain}).
     */
    public Future<Void> close() {
        if (engine != null) return engine.close();
        if (gatewayVertx != null) {
            Future<Void> drained = gateway != null ? gateway.drain(shutdownGraceSeconds) : Future.succeededFuture();
            // the last answers' bytes leave before the connections close
            return drained.compose(v -> {
                Promise<Void> flushed = Promise.promise();
                gatewayVertx.setTimer(100, t -> flushed.complete());
                return flushed.future();
            }).transform(ar -> gatewayVertx.close()).onComplete(ar -> gatewayRegistry.close());
        }
        return Future.succeededFuture();
    }
}
