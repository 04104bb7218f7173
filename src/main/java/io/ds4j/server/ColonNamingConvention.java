package io.ds4j.server;

import io.micrometer.core.instrument.Meter;
import io.micrometer.core.instrument.config.NamingConvention;
import io.micrometer.prometheusmetrics.PrometheusNamingConvention;

/**
 * Micrometer's Prometheus naming, except that a {@code prefix:} (as in vLLM's {@code vllm:time_to_first_token_seconds}
 * or llama.cpp's {@code llamacpp:prompt_tokens_total}) is kept: Micrometer would turn the colon into an underscore,
 * and dashboards written for those servers query the names with the colon. Colons are valid in Prometheus metric names.
 */
final class ColonNamingConvention implements NamingConvention {
    private final PrometheusNamingConvention prometheus = new PrometheusNamingConvention();

    @Override
    public String name(String name, Meter.Type type, String baseUnit) {
        int c = name.indexOf(':');
        if (c <= 0) return prometheus.name(name, type, baseUnit);
        return name.substring(0, c + 1) + prometheus.name(name.substring(c + 1), type, baseUnit);
    }

    @Override
    public String tagKey(String key) {
        return prometheus.tagKey(key);
    }
}
