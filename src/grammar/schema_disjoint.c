/* Whether two JSON Schemas provably match no common value: what makes a oneOf exact when it is
 * compiled as anyOf (a value generated from one branch then fails every other, as oneOf requires).
 *
 * Conservative: true only by one of these rules, false whenever unsure.
 *  1. the JSON types they allow are disjoint (from type, const, enum, nullable, $ref, anyOf / oneOf /
 *     allOf; integer and number count as one type; a schema without type, const or enum allows all);
 *  2. both are enumerations (const / enum) with no value in common;
 *  3. both allow only objects and some property both require has disjoint schemas in the two (the
 *     discriminator pattern: {"kind": {"const": "a"}} against {"kind": {"const": "b"}});
 *  4. both allow only objects and one requires a property the other does not declare and forbids
 *     (additionalProperties false). */
#include <stdbool.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "grammar/gr_internal.h"

enum { T_NULL = 1, T_BOOL = 2, T_NUM = 4, T_STR = 8, T_ARR = 16, T_OBJ = 32, T_ALL = 63 };
#define MAX_DEPTH 16

static const cJSON *item(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k); }

/* s with $ref followed (to "#", "#/$defs/X" or "#/definitions/X"); NULL when it cannot be. */
static const cJSON *deref(const cJSON *root, const cJSON *s) {
    for (int i = 0; i < MAX_DEPTH && s; i++) {
        const cJSON *ref = cJSON_IsObject(s) ? item(s, "$ref") : NULL;
        if (!ref) return s;
        if (!cJSON_IsString(ref)) return NULL;
        const char *r = ref->valuestring;
        if (strcmp(r, "#") == 0) s = root;
        else if (strncmp(r, "#/$defs/", 8) == 0) s = item(item(root, "$defs"), r + 8);
        else if (strncmp(r, "#/definitions/", 14) == 0) s = item(item(root, "definitions"), r + 14);
        else return NULL;
    }
    return NULL;
}

static unsigned value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsNumber(v)) return T_NUM;
    if (cJSON_IsString(v)) return T_STR;
    if (cJSON_IsArray(v)) return T_ARR;
    return T_OBJ;
}

static unsigned type_name(const char *t) {
    if (strcmp(t, "null") == 0) return T_NULL;
    if (strcmp(t, "boolean") == 0) return T_BOOL;
    if (strcmp(t, "number") == 0 || strcmp(t, "integer") == 0) return T_NUM;
    if (strcmp(t, "string") == 0) return T_STR;
    if (strcmp(t, "array") == 0) return T_ARR;
    if (strcmp(t, "object") == 0) return T_OBJ;
    return T_ALL;
}

/* The JSON types a value valid under s may have (a superset). */
static unsigned types_of(const cJSON *root, const cJSON *s, int depth) {
    if (depth > MAX_DEPTH) return T_ALL;
    s = deref(root, s);
    if (!s || cJSON_IsTrue(s)) return T_ALL;
    if (cJSON_IsFalse(s)) return 0;
    if (!cJSON_IsObject(s)) return T_ALL;
    unsigned t = T_ALL;
    const cJSON *type = item(s, "type"), *x;
    if (cJSON_IsString(type)) t &= type_name(type->valuestring);
    else if (cJSON_IsArray(type)) {
        unsigned u = 0;
        cJSON_ArrayForEach(x, type) u |= cJSON_IsString(x) ? type_name(x->valuestring) : T_ALL;
        t &= u;
    }
    if ((x = item(s, "const"))) t &= value_type(x);
    const cJSON *en = item(s, "enum");
    if (cJSON_IsArray(en)) {
        unsigned u = 0;
        cJSON_ArrayForEach(x, en) u |= value_type(x);
        t &= u;
    }
    static const char *const UNIONS[] = {"anyOf", "oneOf"};
    for (int k = 0; k < 2; k++) {
        const cJSON *list = item(s, UNIONS[k]);
        if (!cJSON_IsArray(list)) continue;
        unsigned u = 0;
        cJSON_ArrayForEach(x, list) u |= types_of(root, x, depth + 1);
        t &= u;
    }
    const cJSON *all = item(s, "allOf");
    if (cJSON_IsArray(all)) cJSON_ArrayForEach(x, all) t &= types_of(root, x, depth + 1);
    if (cJSON_IsTrue(item(s, "nullable"))) t |= T_NULL;
    return t;
}

/* The values s allows when it is an enumeration (const or enum, nothing else that could add values). */
static const cJSON *enumeration(const cJSON *s, bool *single) {
    if (!cJSON_IsObject(s) || cJSON_IsTrue(item(s, "nullable"))) return NULL;
    const cJSON *c = item(s, "const");
    if (c) {
        *single = true;
        return c;
    }
    const cJSON *en = item(s, "enum");
    *single = false;
    return cJSON_IsArray(en) ? en : NULL;
}

static bool values_meet(const cJSON *a, bool a1, const cJSON *b, bool b1) {
    for (const cJSON *x = a1 ? a : a->child; x; x = a1 ? NULL : x->next)
        for (const cJSON *y = b1 ? b : b->child; y; y = b1 ? NULL : y->next)
            if (cJSON_Compare(x, y, true)) return true;
    return false;
}

static bool in_array(const cJSON *arr, const char *k) {
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) if (cJSON_IsString(x) && strcmp(x->valuestring, k) == 0) return true;
    return false;
}

/* An object schema read as such: no combinator that could hide other properties. */
static bool plain_object(const cJSON *s) {
    static const char *const COMBOS[] = {"anyOf", "oneOf", "allOf", "$ref", "const", "enum", NULL};
    for (int i = 0; COMBOS[i]; i++)
        if (item(s, COMBOS[i])) return false;
    return true;
}

/* Rule 4: a requires a property b forbids. */
static bool requires_forbidden(const cJSON *a, const cJSON *b) {
    if (!cJSON_IsFalse(item(b, "additionalProperties"))) return false;
    const cJSON *props = item(b, "properties"), *k;
    cJSON_ArrayForEach(k, item(a, "required"))
        if (cJSON_IsString(k) && !item(props, k->valuestring)) return true;
    return false;
}

static bool disjoint(const cJSON *root, const cJSON *a, const cJSON *b, int depth) {
    if (depth > MAX_DEPTH) return false;
    a = deref(root, a);
    b = deref(root, b);
    if (!a || !b) return false;
    unsigned ta = types_of(root, a, depth), tb = types_of(root, b, depth);
    if (!(ta & tb)) return true;
    bool a1, b1;
    const cJSON *va = enumeration(a, &a1), *vb = enumeration(b, &b1);
    if (va && vb) return !values_meet(va, a1, vb, b1);
    if ((ta & tb) != T_OBJ || !cJSON_IsObject(a) || !cJSON_IsObject(b) || !plain_object(a) || !plain_object(b))
        return false;
    const cJSON *ra = item(a, "required"), *rb = item(b, "required"), *k;
    cJSON_ArrayForEach(k, ra) {
        if (!cJSON_IsString(k) || !in_array(rb, k->valuestring)) continue;
        const cJSON *pa = item(item(a, "properties"), k->valuestring), *pb = item(item(b, "properties"), k->valuestring);
        if (pa && pb && disjoint(root, pa, pb, depth + 1)) return true;
    }
    return requires_forbidden(a, b) || requires_forbidden(b, a);
}

bool gr_schema_disjoint(const cJSON *root, const cJSON *a, const cJSON *b) { return disjoint(root, a, b, 0); }
