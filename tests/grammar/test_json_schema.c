/* src/grammar: the JSON Schema and regex front ends: documents accepted
 * and rejected (whole, by bytes), the whitespace policy, numbers with
 * bounds, formats, $ref recursion, allOf/anyOf, and every error. */
#include "core/error.h"
#include "grammar/grammar.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hr_grammar *schema(const char *js) {
    json_error_t je;
    json_t *j = json_loads(js, JSON_DECODE_ANY, &je);
    assert_non_null(j);
    hr_grammar *g = NULL;
    hr_error err = {0};
    int rc = hr_grammar_from_json_schema(&g, j, &err);
    if (rc)
        fprintf(stderr, "schema %s: %s\n", js, err.msg);
    assert_int_equal(rc, 0);
    json_decref(j);
    return g;
}

/* 1 complete, 0 prefix, -1 rejected */
static int run(const hr_grammar *g, const char *s) {
    hr_matcher *m;
    assert_int_equal(hr_matcher_new(&m, g, NULL, NULL), 0);
    int r = hr_matcher_accept_bytes(m, s, strlen(s), NULL) ? -1 : hr_matcher_can_end(m) ? 1 : 0;
    hr_matcher_free(m);
    return r;
}

#define YES(g, s) assert_int_equal(run(g, s), 1)
#define NO(g, s) assert_int_not_equal(run(g, s), 1)

static void test_objects(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                           "\"age\":{\"type\":\"integer\",\"minimum\":0},\"tags\":{\"type\":\"array\","
                           "\"items\":{\"type\":\"string\"}}},\"required\":[\"name\"],"
                           "\"additionalProperties\":false}");
    YES(g, "{\"name\": \"Al\", \"age\": 30, \"tags\": [\"a\", \"b\"]}");
    YES(g, "{\"name\":\"Al\",\"age\":30}");          /* compact */
    YES(g, "{\"name\": \"A\\\"l\\n\\u0001\"}");       /* canonical escapes */
    NO(g, "{\"age\": 30}");                          /* required */
    NO(g, "{\"name\": \"Al\", \"x\": 1}");           /* additional */
    NO(g, "{\"age\": 3, \"name\": \"Al\"}");         /* schema order */
    NO(g, "{\"name\": \"Al\", \"age\": -1}");        /* minimum */
    NO(g, "{ \"name\": \"Al\"}");                    /* whitespace policy */
    NO(g, "{\"name\"  : \"Al\"}");
    NO(g, "{\"name\": \"Al\",  \"age\": 1}");
    NO(g, "{\"name\": \"\\u0041\"}");                /* non-canonical escape */
    hr_grammar_free(g);
    /* additional properties: any key but the declared ones */
    g = schema("{\"properties\":{\"a\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"boolean\"}}");
    YES(g, "{\"a\": 1, \"b\": true, \"ab\": false}");
    NO(g, "{\"a\": 1, \"a\": true}");
    NO(g, "{\"b\": 1}");
    YES(g, "\"a string\""); /* no type: any type */
    hr_grammar_free(g);
}

static void test_arrays(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}");
    YES(g, "[1, 2]");
    YES(g, "[1,2,3]");
    NO(g, "[1]");
    NO(g, "[1, 2, 3, 4]");
    NO(g, "[]");
    hr_grammar_free(g);
    g = schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"null\"}],"
               "\"items\":false}");
    YES(g, "[]");
    YES(g, "[\"x\"]");
    YES(g, "[\"x\", null]");
    NO(g, "[\"x\", null, 1]");
    NO(g, "[null]");
    hr_grammar_free(g);
}

static void test_numbers(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":120}");
    for (int i = -20; i <= 130; i++) {
        char b[16];
        snprintf(b, sizeof b, "%d", i);
        assert_int_equal(run(g, b) == 1, i >= -15 && i <= 120);
    }
    NO(g, "007");
    NO(g, "-0");
    hr_grammar_free(g);
    g = schema("{\"type\":\"integer\",\"exclusiveMinimum\":99}");
    NO(g, "99");
    YES(g, "100");
    YES(g, "123456789012");
    hr_grammar_free(g);
    g = schema("{\"type\":\"number\",\"minimum\":0,\"exclusiveMaximum\":1}");
    YES(g, "0");
    YES(g, "0.5");
    YES(g, "0.999");
    NO(g, "1");
    NO(g, "1.0");
    NO(g, "-0.1");
    hr_grammar_free(g);
    g = schema("{\"type\":\"number\",\"maximum\":-2}");
    YES(g, "-2");
    YES(g, "-2.0");
    YES(g, "-3.25");
    NO(g, "-1.5");
    NO(g, "-2.5e1");
    hr_grammar_free(g);
    g = schema("{\"type\":\"number\"}");
    YES(g, "-1.5e-07");
    YES(g, "1E+2");
    NO(g, "01");
    NO(g, ".5");
    hr_grammar_free(g);
}

/* "not" in the forms that fold into the other keywords; const with type */
static void test_not(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"not\":{}}");
    NO(g, "1");
    NO(g, "null");
    hr_grammar_free(g);
    g = schema("{\"not\":false}");
    YES(g, "[1]");
    hr_grammar_free(g);
    g = schema("{\"type\":[\"string\",\"integer\"],\"not\":{\"type\":\"string\"}}");
    YES(g, "5");
    NO(g, "\"a\"");
    hr_grammar_free(g);
    g = schema("{\"nullable\":true,\"type\":\"boolean\",\"not\":{\"type\":\"null\"}}");
    YES(g, "true");
    NO(g, "null");
    hr_grammar_free(g);
    g = schema("{\"not\":{\"type\":\"number\"}}");
    YES(g, "\"x\"");
    NO(g, "1");
    NO(g, "1.5");
    hr_grammar_free(g);
    g = schema("{\"not\":{\"not\":{\"type\":\"boolean\"}}}");
    YES(g, "true");
    NO(g, "1");
    hr_grammar_free(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{\"type\":[\"string\",\"null\"]}}}}");
    YES(g, "{\"a\": [1]}");
    NO(g, "{\"a\": null}");
    hr_grammar_free(g);
    g = schema("{\"const\":\"x\",\"type\":\"integer\"}");
    NO(g, "\"x\"");
    hr_grammar_free(g);
    g = schema("{\"const\":\"a\",\"enum\":[\"b\"]}");
    NO(g, "\"a\"");
    NO(g, "\"b\"");
    hr_grammar_free(g);
    g = schema("{\"const\":\"a\",\"enum\":[\"b\",\"a\"]}");
    YES(g, "\"a\"");
    hr_grammar_free(g);
}

static void test_pattern_properties(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
                           "\"patternProperties\":{\"^x-\":{\"type\":\"string\"}},"
                           "\"additionalProperties\":false}");
    YES(g, "{\"id\": 1, \"x-a\": \"s\", \"x-\\\"q\": \"t\"}");
    YES(g, "{\"x-b\": \"t\"}");
    YES(g, "{}");
    NO(g, "{\"id\": 1, \"x-a\": 2}");   /* the pattern's schema */
    NO(g, "{\"id\": 1, \"y\": \"s\"}"); /* no pattern matches */
    NO(g, "{\"ax-\": \"s\"}");
    hr_grammar_free(g);
    /* several patterns with one schema; unanchored; keys matching none are
       not produced even though additionalProperties allows them */
    g = schema("{\"type\":\"object\",\"patternProperties\":{\"^[0-9]+$\":{\"type\":\"boolean\"},"
               "\"_id\":{\"type\":\"boolean\"}}}");
    YES(g, "{\"12\": true, \"my_id2\": false}");
    NO(g, "{\"12a\": true}");
    NO(g, "{\"12\": 1}");
    hr_grammar_free(g);
    /* an empty patternProperties is no constraint */
    g = schema("{\"type\":\"object\",\"patternProperties\":{},\"additionalProperties\":{\"type\":\"null\"}}");
    YES(g, "{\"a\": null}");
    NO(g, "{\"a\": 1}");
    hr_grammar_free(g);
}

static void test_strings_and_formats(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    YES(g, "\"ab\"");
    YES(g, "\"\xc3\xa9\xe2\x82\xac\\n\""); /* code points, not bytes */
    NO(g, "\"a\"");
    NO(g, "\"abcd\"");
    hr_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d+$\"}");
    YES(g, "\"AB-12\"");
    NO(g, "\"AB-\"");
    NO(g, "\"xAB-1\"");
    hr_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"ab\"}"); /* unanchored */
    YES(g, "\"xxabyy\"");
    NO(g, "\"xxa\"");
    hr_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"date-time\"}");
    YES(g, "\"2024-02-29T12:30:00Z\"");
    YES(g, "\"2023-12-31t23:59:59.123+05:30\"");
    NO(g, "\"2023-02-29T12:30:00Z\"");
    NO(g, "\"2023-04-31T12:30:00Z\"");
    NO(g, "\"2023-01-01T24:00:00Z\"");
    NO(g, "\"2023-01-01T12:00:00\"");
    NO(g, "\"2023-01-01 12:00:00Z\""); /* RFC 3339 allows it, validators do not */
    hr_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"uuid\"}");
    YES(g, "\"123e4567-e89b-12d3-a456-426614174000\"");
    NO(g, "\"123e4567-e89b-12d3-a456-42661417400\"");
    hr_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"email\"}");
    YES(g, "\"a.b+c@example.co.uk\"");
    NO(g, "\"a@b\"");
    NO(g, "\"a@@b.com\"");
    hr_grammar_free(g);
    /* a format JSON Schema does not define is an annotation: any string */
    g = schema("{\"type\":\"string\",\"format\":\"int32\",\"maxLength\":3}");
    YES(g, "\"x y\"");
    NO(g, "\"abcd\"");
    NO(g, "12");
    hr_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"my-own\",\"pattern\":\"^a+$\"}");
    YES(g, "\"aa\"");
    NO(g, "\"ab\"");
    hr_grammar_free(g);
}

static void test_literals_and_combinators(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"enum\":[\"red\",1,2.5,null,{\"a\":[1,true]},\"q\\\"\"]}");
    YES(g, "\"red\"");
    YES(g, "1");
    YES(g, "1.0");
    YES(g, "2.5");
    YES(g, "null");
    YES(g, "{\"a\": [1, true]}");
    YES(g, "{\"a\":[1,true]}");
    YES(g, "\"q\\\"\"");
    NO(g, "\"blue\"");
    NO(g, "2");
    hr_grammar_free(g);
    g = schema("{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}");
    YES(g, "\"x\"");
    YES(g, "12");
    NO(g, "true");
    hr_grammar_free(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
               "\"allOf\":[{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}],"
               "\"additionalProperties\":false}");
    NO(g, "{\"a\": 1}"); /* b is required, but the false side forbids it */
    NO(g, "{\"a\": 1, \"b\": \"x\"}");
    hr_grammar_free(g);
    g = schema("{\"oneOf\":[{\"type\":\"string\"},{\"enum\":[1,2]},{\"type\":\"null\"}]}");
    YES(g, "\"x\"");
    YES(g, "2");
    YES(g, "null");
    NO(g, "3");
    hr_grammar_free(g);
    /* oneOf of objects told apart by a discriminator (the parent's type and
       required merged into each branch), by literals, by closed property sets */
    g = schema("{\"type\":\"object\",\"required\":[\"kind\"],\"oneOf\":["
               "{\"properties\":{\"kind\":{\"const\":\"a\"},\"x\":{\"type\":\"integer\"}}},"
               "{\"properties\":{\"kind\":{\"enum\":[\"b\",\"c\"]},\"y\":{\"type\":\"string\"}}}]}");
    YES(g, "{\"kind\": \"a\", \"x\": 1}");
    YES(g, "{\"kind\": \"c\", \"y\": \"s\"}");
    NO(g, "{\"kind\": \"a\", \"x\": \"s\"}");
    hr_grammar_free(g);
    g = schema("{\"oneOf\":[{\"enum\":[1,\"x\"]},{\"const\":2}]}");
    YES(g, "2");
    NO(g, "3");
    hr_grammar_free(g);
    g = schema("{\"type\":\"object\",\"oneOf\":["
               "{\"properties\":{\"a\":{}},\"additionalProperties\":false},"
               "{\"required\":[\"b\"]}]}");
    YES(g, "{\"a\": 1}");
    YES(g, "{\"b\": 1}");
    hr_grammar_free(g);
    g = schema("{\"type\":[\"string\",\"null\"]}");
    YES(g, "null");
    YES(g, "\"s\"");
    NO(g, "1");
    hr_grammar_free(g);
    g = schema("{\"type\":\"integer\",\"nullable\":true}");
    YES(g, "null");
    hr_grammar_free(g);
    g = schema("{\"const\":42}");
    YES(g, "42");
    NO(g, "43");
    hr_grammar_free(g);
}

static void test_refs(void **state) {
    (void)state;
    hr_grammar *g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                           "\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                           "\"required\":[\"v\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}");
    YES(g, "{\"v\": 1, \"kids\": [{\"v\": 2}, {\"v\": 3, \"kids\": [{\"v\": 4, \"kids\": []}]}]}");
    NO(g, "{\"v\": 1, \"kids\": [{}]}");
    hr_grammar_free(g);
    g = schema("{\"definitions\":{\"a~b\":{\"type\":\"boolean\"}},\"properties\":{\"x\":{\"$ref\":"
               "\"#/definitions/a~0b\"}},\"type\":\"object\"}");
    YES(g, "{\"x\": true}");
    NO(g, "{\"x\": 1}");
    hr_grammar_free(g);
}

static void test_json_object_and_dumps(void **state) {
    (void)state;
    hr_grammar *g;
    assert_int_equal(hr_grammar_json_object(&g, NULL), 0);
    YES(g, "{}");
    YES(g, "{\"a\": [1, {\"b\": null}], \"c\": \"\\t\"}");
    NO(g, "[]");
    NO(g, "{\"a\": 1,}");
    hr_grammar_free(g);
    json_t *j = json_loads("{\"a\":[1,2.5,1e-05,1e16,100000.0,\"\\u00e9\\n\"],\"b\":{}}", 0, NULL);
    char *s = hr_grammar_json_dumps(j);
    assert_string_equal(s, "{\"a\": [1, 2.5, 1e-05, 1e+16, 100000.0, \"\xc3\xa9\\n\"], \"b\": {}}");
    free(s);
    json_decref(j);
}

static void expect_error(const char *js, int code, const char *needle) {
    json_t *j = json_loads(js, JSON_DECODE_ANY, NULL);
    assert_non_null(j);
    hr_grammar *g = NULL;
    hr_error err = {0};
    int rc = hr_grammar_from_json_schema(&g, j, &err);
    if (rc != code || !strstr(err.msg, needle))
        fprintf(stderr, "for %s: rc %d msg %s\n", js, rc, err.msg);
    assert_int_equal(rc, code);
    assert_null(g);
    assert_non_null(strstr(err.msg, needle));
    json_decref(j);
}

static void test_schema_errors(void **state) {
    (void)state;
    expect_error("{\"not\":{\"required\":[\"a\"]}}", HR_EUNSUPPORTED, "keyword 'not'");
    expect_error("{\"type\":\"number\",\"not\":{\"type\":\"integer\"}}", HR_EUNSUPPORTED, "'not' an integer");
    expect_error("{\"not\":3}", HR_EINVAL, "'not' must be a schema");
    expect_error("{\"if\":{}}", HR_EUNSUPPORTED, "keyword 'if'");
    expect_error("{\"type\":\"object\",\"propertyNames\":{}}", HR_EUNSUPPORTED, "'propertyNames'");
    expect_error("{\"type\":\"object\",\"patternProperties\":{\"^a\":{\"type\":\"string\"},"
                 "\"^b\":{\"type\":\"integer\"}}}", HR_EUNSUPPORTED, "different schemas");
    expect_error("{\"type\":\"object\",\"properties\":{\"x-id\":{}},"
                 "\"patternProperties\":{\"^x-\":{}}}", HR_EUNSUPPORTED, "'x-id' matching");
    expect_error("{\"type\":\"object\",\"required\":[\"x-id\"],"
                 "\"patternProperties\":{\"^x-\":{}}}", HR_EUNSUPPORTED, "'x-id' matching");
    expect_error("{\"type\":\"object\",\"patternProperties\":{\"(\":{}}}", HR_EINVAL, "patternProperties");
    expect_error("{\"type\":\"object\",\"patternProperties\":[]}", HR_EINVAL, "'patternProperties' must");
    expect_error("{\"type\":\"object\",\"propertyNames\":{}}", HR_EUNSUPPORTED, "'propertyNames'");
    expect_error("{\"type\":\"object\",\"dependencies\":{}}", HR_EUNSUPPORTED, "'dependencies'");
    expect_error("{\"type\":\"object\",\"minProperties\":1}", HR_EUNSUPPORTED, "'minProperties'");
    expect_error("{\"type\":\"object\",\"maxProperties\":1}", HR_EUNSUPPORTED, "'maxProperties'");
    expect_error("{\"type\":\"array\",\"uniqueItems\":true}", HR_EUNSUPPORTED, "'uniqueItems'");
    expect_error("{\"type\":\"array\",\"contains\":{}}", HR_EUNSUPPORTED, "'contains'");
    expect_error("{\"type\":\"number\",\"multipleOf\":3}", HR_EUNSUPPORTED, "'multipleOf'");
    expect_error("{\"type\":\"number\",\"minimum\":0.5}", HR_EUNSUPPORTED, "non-integer");
    expect_error("{\"type\":\"integer\",\"maximum\":1e30}", HR_EUNSUPPORTED, "beyond 1e18");
    expect_error("{\"type\":\"string\",\"format\":\"uri\"}", HR_EUNSUPPORTED, "format 'uri'");
    expect_error("{\"type\":\"string\",\"format\":\"ipv6\"}", HR_EUNSUPPORTED, "format 'ipv6'");
    expect_error("{\"type\":\"string\",\"pattern\":\"a\",\"maxLength\":3}", HR_EUNSUPPORTED, "together with");
    expect_error("{\"type\":\"string\",\"pattern\":\"a\",\"format\":\"uuid\"}", HR_EUNSUPPORTED, "together with 'format'");
    expect_error("{\"type\":\"string\",\"pattern\":1}", HR_EINVAL, "'pattern' must be a string");
    expect_error("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", HR_EUNSUPPORTED, "lookaround");
    expect_error("{\"type\":\"string\",\"maxLength\":1000000}", HR_EUNSUPPORTED, "length bounds");
    expect_error("{\"type\":\"array\",\"maxItems\":1000000}", HR_EUNSUPPORTED, "length bounds");
    expect_error("{\"$ref\":\"#/nope\"}", HR_EINVAL, "does not resolve");
    expect_error("{\"$ref\":\"http://x/y.json\"}", HR_EUNSUPPORTED, "outside the schema");
    expect_error("{\"$ref\":\"#anchor\"}", HR_EUNSUPPORTED, "anchors");
    expect_error("{\"$ref\":1}", HR_EINVAL, "$ref must be a string");
    expect_error("{\"allOf\":{}}", HR_EINVAL, "allOf must be an array");
    expect_error("{\"allOf\":[{\"pattern\":\"a\"},{\"pattern\":\"b\"}]}", HR_EUNSUPPORTED, "two different 'pattern'");
    expect_error("{\"anyOf\":[]}", HR_EINVAL, "non-empty array");
    expect_error("{\"oneOf\":[{\"type\":\"number\"},{\"type\":\"integer\"}]}", HR_EUNSUPPORTED, "may overlap");
    expect_error("{\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}", HR_EUNSUPPORTED, "may overlap");
    /* a discriminator not required in both, literals that meet (1 == 1.0),
       a closed branch that declares what the other requires: may overlap */
    expect_error("{\"type\":\"object\",\"oneOf\":[{\"properties\":{\"k\":{\"const\":1}},\"required\":[\"k\"]},"
                 "{\"properties\":{\"k\":{\"const\":2}}}]}", HR_EUNSUPPORTED, "may overlap");
    expect_error("{\"oneOf\":[{\"enum\":[1,\"x\"]},{\"const\":1.0}]}", HR_EUNSUPPORTED, "may overlap");
    expect_error("{\"type\":\"object\",\"oneOf\":[{\"properties\":{\"b\":{}},\"additionalProperties\":false},"
                 "{\"required\":[\"b\"]}]}", HR_EUNSUPPORTED, "may overlap");
    expect_error("{\"anyOf\":[{}],\"oneOf\":[{}]}", HR_EUNSUPPORTED, "together with 'oneOf'");
    expect_error("{\"enum\":1}", HR_EINVAL, "'enum' must be an array");
    expect_error("{\"type\":\"bogus\"}", HR_EINVAL, "unknown 'type'");
    expect_error("{\"properties\":[]}", HR_EINVAL, "'properties' must be an object");
    expect_error("{\"required\":{}}", HR_EINVAL, "'required' must be an array");
    expect_error("{\"required\":[1]}", HR_EINVAL, "must list strings");
    expect_error("{\"prefixItems\":{},\"type\":\"array\"}", HR_EINVAL, "'prefixItems' must be an array");
    expect_error("1", HR_EINVAL, "object or a boolean");
    expect_error("{\"$ref\":\"#\"}", HR_EUNSUPPORTED, "left-recursive");
    expect_error("{\"properties\":{\"a\":{\"properties\":{\"b\":{\"not\":{\"enum\":[1]}}}}}}", HR_EUNSUPPORTED,
                 "#/properties/a/properties/b");
    /* nesting */
    char deep[4096] = "";
    for (int i = 0; i < 100; i++)
        strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 100; i++)
        strcat(deep, "}");
    expect_error(deep, HR_ERANGE, "nested too deeply");
    hr_grammar *g;
    hr_error err;
    assert_int_equal(hr_grammar_from_json_schema(&g, NULL, &err), HR_EINVAL);
}

static void test_regex(void **state) {
    (void)state;
    hr_grammar *g;
    assert_int_equal(hr_grammar_from_regex(&g, "(ab|c)+\\d{2,3}[^x-z]?", NULL), 0);
    YES(g, "abcab12");
    YES(g, "c123w");
    NO(g, "c1");
    NO(g, "c123x");
    hr_grammar_free(g);
    assert_int_equal(hr_grammar_from_regex(&g, "^\\w+\\s\\u00e9\\x41.$", NULL), 0);
    YES(g, "a_1 \xc3\xa9" "AZ");
    NO(g, "a_1 \xc3\xa9" "A\n");
    hr_grammar_free(g);
    static const struct { const char *re; int code; const char *msg; } E[] = {
        {"a(b", HR_EINVAL, "missing ')'"},
        {"a)b", HR_EINVAL, "unmatched ')'"},
        {"[ab", HR_EINVAL, "unterminated character class"},
        {"[z-a]", HR_EINVAL, "out of order"},
        {"*a", HR_EINVAL, "nothing to repeat"},
        {"a{3,2}", HR_EINVAL, "n < m"},
        {"a{2", HR_EINVAL, "bad {m,n}"},
        {"a{999999}", HR_ERANGE, "too large"},
        {"\\1", HR_EUNSUPPORTED, "backreferences"},
        {"a\\b", HR_EUNSUPPORTED, "word boundaries"},
        {"(?=a)", HR_EUNSUPPORTED, "lookaround"},
        {"a^b", HR_EUNSUPPORTED, "anchor"},
        {"\\p{L}", HR_EUNSUPPORTED, "escape"},
        {"\\x4", HR_EINVAL, "bad hex"},
        {"\\u{110000}", HR_EINVAL, "bad \\u{"},
        {"a\\", HR_EINVAL, "trailing backslash"},
        {"\\01", HR_EUNSUPPORTED, "octal"},
        {"(?<n", HR_EINVAL, "unterminated group name"},
        {"\xff", HR_EINVAL, "invalid UTF-8"},
        {"[a-\\d]", HR_EUNSUPPORTED, "range end"},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        hr_error err = {0};
        int rc = hr_grammar_from_regex(&g, E[i].re, &err);
        if (rc != E[i].code || !strstr(err.msg, E[i].msg))
            fprintf(stderr, "regex %s: rc %d msg %s\n", E[i].re, rc, err.msg);
        assert_int_equal(rc, E[i].code);
        assert_non_null(strstr(err.msg, E[i].msg));
    }
    char deep[600] = "";
    for (int i = 0; i < 250; i++)
        strcat(deep, "(");
    hr_error err;
    assert_int_equal(hr_grammar_from_regex(&g, deep, &err), HR_ERANGE);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_objects),
        cmocka_unit_test(test_arrays),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_strings_and_formats),
        cmocka_unit_test(test_pattern_properties),
        cmocka_unit_test(test_not),
        cmocka_unit_test(test_literals_and_combinators),
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_json_object_and_dumps),
        cmocka_unit_test(test_schema_errors),
        cmocka_unit_test(test_regex),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
