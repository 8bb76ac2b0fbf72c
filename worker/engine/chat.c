/* chat.c: Qwen2.5's ChatML prompt for `messages` requests.
 *
 * The same text Qwen2.5's chat_template produces with
 * add_generation_prompt=True and no tools: the default system message
 * when the conversation does not start with one, each message as
 * <|im_start|>{role}\n{content}<|im_end|>\n, then the assistant header. */
#include <string.h>

#include "worker/lib/bytebuf.h"
#include "worker/engine/prompt.h"

#define CHAT_DEFAULT_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

static int chat_turn(bytebuf *b, const char *role, const char *content) {
    return bytebuf_append(b, "<|im_start|>", 12) || bytebuf_append(b, role, strlen(role)) ||
           bytebuf_putc(b, '\n') || bytebuf_append(b, content, strlen(content)) ||
           bytebuf_append(b, "<|im_end|>\n", 11);
}

int prompt_render_chat(const rlMessage *msgs, int n_msgs, char **text, rlError *err) {
    *text = NULL;
    if (n_msgs < 1) return rl_error(err, RL_EINPUT, "messages: the array is empty; give at least one message");
    for (int i = 0; i < n_msgs; i++)
        if (!msgs[i].role || !msgs[i].role[0] || !msgs[i].content)
            return rl_error(err, RL_EINPUT, "messages[%d]: needs a non-empty \"role\" and a \"content\" string", i);
    bytebuf b = {0};
    int bad = strcmp(msgs[0].role, "system") ? chat_turn(&b, "system", CHAT_DEFAULT_SYSTEM) : 0;
    for (int i = 0; i < n_msgs && !bad; i++) bad = chat_turn(&b, msgs[i].role, msgs[i].content);
    if (!bad) bad = bytebuf_append(&b, "<|im_start|>assistant\n", 22);
    if (bad || !(*text = bytebuf_steal(&b, NULL))) {
        bytebuf_free(&b);
        return rl_error(err, RL_EMEMORY, "out of memory");
    }
    return 0;
}
