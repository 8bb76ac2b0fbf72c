/* item.c: jobs and the Redis writes they owe (see item.h). */
#include "item.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rlJob *job_create(const char *entry, const char *id, size_t id_len, const char *reply_to,
                  rlEncoding enc, int attempt) {
    rlJob *j = calloc(1, sizeof(*j));
    if (!j) return NULL;
    snprintf(j->entry, sizeof(j->entry), "%s", entry);
    j->enc = enc;
    j->attempt = attempt;
    if (id) {
        j->id = strndup(id, id_len);
        if (reply_to) j->reply_to = strdup(reply_to);
        else if (j->id && (j->reply_to = malloc(id_len + 14)))
            snprintf(j->reply_to, id_len + 14, "redlm:reply:%s", j->id);
        if (!j->id || !j->reply_to) {
            job_free(j);
            return NULL;
        }
    }
    return j;
}

void job_free(rlJob *j) {
    if (!j) return;
    free(j->id);
    free(j->reply_to);
    free(j);
}

rlItem *item_create(rlItemKind kind, rlJob *job, int argc, const char *const *argv,
                    const size_t *argvlen) {
    size_t bytes = sizeof(rlItem) + (size_t)argc * (sizeof(char *) + sizeof(size_t));
    for (int i = 0; i < argc; i++) bytes += argvlen[i] + 1;
    rlItem *it = malloc(bytes);
    if (!it) return NULL;
    it->next = NULL;
    it->kind = kind;
    it->job = job;
    it->argc = argc;
    it->argv = (char **)(it + 1);
    it->argvlen = (size_t *)(it->argv + argc);
    char *p = (char *)(it->argvlen + argc);
    for (int i = 0; i < argc; i++) {
        memcpy(p, argv[i], argvlen[i]);
        p[argvlen[i]] = 0;
        it->argv[i] = p;
        it->argvlen[i] = argvlen[i];
        p += argvlen[i] + 1;
    }
    return it;
}

void item_free(rlItem *it) { free(it); }

size_t item_bytes(const rlItem *it) {
    size_t b = sizeof(*it);
    for (int i = 0; i < it->argc; i++) b += it->argvlen[i] + 1 + sizeof(char *) + sizeof(size_t);
    return b;
}

void items_push(rlItemList *l, rlItem *it) {
    it->next = NULL;
    if (l->tail) l->tail->next = it;
    else l->head = it;
    l->tail = it;
    l->n++;
}

void items_append(rlItemList *l, rlItemList *from) {
    if (!from->head) return;
    if (l->tail) l->tail->next = from->head;
    else l->head = from->head;
    l->tail = from->tail;
    l->n += from->n;
    from->head = from->tail = NULL;
    from->n = 0;
}

rlItem *items_pop(rlItemList *l) {
    rlItem *it = l->head;
    if (!it) return NULL;
    l->head = it->next;
    if (!l->head) l->tail = NULL;
    l->n--;
    it->next = NULL;
    return it;
}
