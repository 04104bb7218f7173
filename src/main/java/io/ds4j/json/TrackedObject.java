package io.ds4j.json;

import com.fasterxml.jackson.core.JsonPointer;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * A JSON object that records the names it was asked for ({@link #get}, {@link #path}, {@link #has}, ...), so that
 * the fields nobody read can be found afterwards (the server reports a request body's unread fields). Going over all
 * of its fields ({@link #properties}, {@link #fields}, ...) uses it whole: a parser that iterates an object
 * (logit_bias' token ids, a schema compiled) takes every field as data. Reads may come from the worker thread that
 * tokenises a request, so the record is synchronized. {@link Json#read} builds every object of a text as one.
 */
public final class TrackedObject extends ObjectNode {
    private final Set<String> asked = new HashSet<>(8);
    private volatile boolean whole;

    TrackedObject(JsonNodeFactory f) {
        super(f);
    }

    private void ask(String name) {
        if (name == null) return;
        synchronized (asked) {
            asked.add(name);
        }
    }

    /** Marks the object as used whole: every field of it counts as read. */
    public void useWhole() {
        whole = true;
    }

    /** Whether the object was used whole ({@link #useWhole}, or all of its fields gone over). */
    public boolean usedWhole() {
        return whole;
    }

    /** Whether no name was asked for (the object was never looked into). */
    public boolean askedNone() {
        synchronized (asked) {
            return asked.isEmpty();
        }
    }

    /** Whether the name was asked for. */
    public boolean wasAsked(String name) {
        synchronized (asked) {
            return asked.contains(name);
        }
    }

    /** The names asked for, in no order. */
    public List<String> askedNames() {
        synchronized (asked) {
            return List.copyOf(asked);
        }
    }

    /** The fields, without counting as a read. */
    public Set<Map.Entry<String, JsonNode>> children() {
        return _children.entrySet();
    }

    @Override
    public JsonNode get(String name) {
        ask(name);
        return super.get(name);
    }

    @Override
    public JsonNode path(String name) {
        ask(name);
        return super.path(name);
    }

    @Override
    public JsonNode required(String name) {
        ask(name);
        return super.required(name);
    }

    @Override
    protected JsonNode _at(JsonPointer ptr) {
        ask(ptr.getMatchingProperty());
        return super._at(ptr);
    }

    @Override
    public Set<Map.Entry<String, JsonNode>> properties() {
        whole = true;
        return super.properties();
    }

    @Override
    public Iterator<Map.Entry<String, JsonNode>> fields() {
        whole = true;
        return super.fields();
    }

    @Override
    public Iterator<String> fieldNames() {
        whole = true;
        return super.fieldNames();
    }

    @Override
    public Iterator<JsonNode> elements() {
        whole = true;
        return super.elements();
    }

    @Override
    public JsonNode findValue(String name) {
        whole = true;
        return super.findValue(name);
    }

    @Override
    public ObjectNode findParent(String name) {
        whole = true;
        return super.findParent(name);
    }

    @Override
    public List<JsonNode> findValues(String name, List<JsonNode> found) {
        whole = true;
        return super.findValues(name, found);
    }

    @Override
    public List<String> findValuesAsText(String name, List<String> found) {
        whole = true;
        return super.findValuesAsText(name, found);
    }

    @Override
    public List<JsonNode> findParents(String name, List<JsonNode> found) {
        whole = true;
        return super.findParents(name, found);
    }
}
