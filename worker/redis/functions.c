/* functions.c: the Lua library behind every job write (see functions.h).
 *
 * Job functions take KEYS = job stream, running hash, dead-letter stream
 * [, reply stream] and ARGV = group, entry, consumer, attempt, job id (empty
 * when the entry has none), dead-letter cap (0: none) [, ...].  The fence is
 * the pair (consumer, delivery count) XPENDING reports for the entry: XCLAIM
 * by anyone else changes the owner and raises the count, and the worker's
 * own idle refresh (XCLAIM JUSTID) changes neither, so it works as a lease
 * token that needs no key of its own. */
#include "worker/redis/functions.h"

#include <string.h>

const char functions_library[] =
    "#!lua name=redlm\n"
    "local function fields(t)\n"
    "  local m = {}\n"
    "  for i = 1, #t, 2 do m[t[i]] = t[i + 1] end\n"
    "  return m\n"
    "end\n"
    /* nil when the entry is ours, else why not */
    "local function fence(keys, args)\n"
    "  local ok, p = pcall(redis.call, 'XPENDING', keys[1], args[1], args[2], args[2], 1)\n"
    "  if not ok then return 'group ' .. args[1] .. ' is gone' end\n"
    "  if #p == 0 then return 'entry ' .. args[2] .. ' is no longer pending' end\n"
    "  if p[1][2] ~= args[3] or p[1][4] ~= tonumber(args[4]) then\n"
    "    return 'entry ' .. args[2] .. ' is now held by ' .. p[1][2] .. ' (delivery ' .. p[1][4] .. ')'\n"
    "  end\n"
    "  return nil\n"
    "end\n"
    "local function lost(why) return redis.error_reply('LOST ' .. why) end\n"
    /* the entry's own fields (not a copy of a copy), then what went wrong */
    "local function dead_letter(keys, args, err)\n"
    "  local cmd = {'XADD', keys[3]}\n"
    "  if tonumber(args[6]) > 0 then\n"
    "    cmd[#cmd + 1] = 'MAXLEN'; cmd[#cmd + 1] = '~'; cmd[#cmd + 1] = args[6]\n"
    "  end\n"
    "  cmd[#cmd + 1] = '*'\n"
    "  local e = redis.call('XRANGE', keys[1], args[2], args[2])\n"
    "  if #e > 0 then\n"
    "    local f = e[1][2]\n"
    "    for i = 1, math.min(#f, 2000) do cmd[#cmd + 1] = f[i] end\n"
    "  end\n"
    "  for _, v in ipairs({'error', err, 'stream', keys[1], 'entry', args[2], 'consumer', args[3],\n"
    "                      'attempt', args[4]}) do cmd[#cmd + 1] = v end\n"
    "  redis.call(unpack(cmd))\n"
    "end\n"
    "local function ack(keys, args)\n"
    "  redis.call('XACK', keys[1], args[1], args[2])\n"
    "  if args[5] ~= '' and redis.call('HGET', keys[2], args[5]) == args[2] then\n"
    "    redis.call('HDEL', keys[2], args[5])\n"
    "  end\n"
    "end\n"
    /* a job about to run: ours, and no other pending entry runs its id */
    "redis.register_function('redlm_start', function(keys, args)\n"
    "  local why = fence(keys, args)\n"
    "  if why then return lost(why) end\n"
    "  if args[5] == '' then return 'OK' end\n"
    "  local cur = redis.call('HGET', keys[2], args[5])\n"
    "  if cur and cur ~= args[2] and\n"
    "     #redis.call('XPENDING', keys[1], args[1], cur, cur, 1) > 0 then\n"
    "    return 'DUPLICATE ' .. cur\n"
    "  end\n"
    "  redis.call('HSET', keys[2], args[5], args[2])\n"
    "  return 'OK'\n"
    "end)\n"
    /* ARGV[7] ttl, [8] field, [9] payload */
    "redis.register_function('redlm_reply', function(keys, args)\n"
    "  local why = fence(keys, args)\n"
    "  if why then return lost(why) end\n"
    "  local t = redis.call('TYPE', keys[4])['ok']\n"
    "  if (t ~= 'none' and t ~= 'stream') or keys[4] == keys[1] or keys[4] == keys[3] then\n"
    "    local msg = 'reply key ' .. keys[4] .. ' is not a reply stream (it holds a ' .. t .. ')'\n"
    "    dead_letter(keys, args, cjson.encode({code = 'reply_refused', message = msg}))\n"
    "    ack(keys, args)\n"
    "    return redis.error_reply('REFUSED ' .. msg)\n"
    "  end\n"
    "  redis.call('XADD', keys[4], '*', args[8], args[9])\n"
    "  if tonumber(args[7]) > 0 then redis.call('EXPIRE', keys[4], args[7]) end\n"
    "  return 1\n"
    "end)\n"
    /* ARGV[7] the error as JSON */
    "redis.register_function('redlm_dead', function(keys, args)\n"
    "  local why = fence(keys, args)\n"
    "  if why then return lost(why) end\n"
    "  dead_letter(keys, args, args[7])\n"
    "  return 1\n"
    "end)\n"
    "redis.register_function('redlm_ack', function(keys, args)\n"
    "  local why = fence(keys, args)\n"
    "  if why then return lost(why) end\n"
    "  ack(keys, args)\n"
    "  return 1\n"
    "end)\n"
    /* KEYS stream; ARGV group, consumer, then (entry, attempt) pairs: the
     * idle time of those still ours is reset, the others are returned */
    "redis.register_function('redlm_refresh', function(keys, args)\n"
    "  local gone, mine = {}, {'XCLAIM', keys[1], args[1], args[2], '0'}\n"
    "  for i = 3, #args - 1, 2 do\n"
    "    local why = fence(keys, {args[1], args[i], args[2], args[i + 1]})\n"
    "    if why then gone[#gone + 1] = args[i] else mine[#mine + 1] = args[i] end\n"
    "  end\n"
    "  if #mine > 5 then\n"
    "    mine[#mine + 1] = 'JUSTID'\n"
    "    redis.call(unpack(mine))\n"
    "  end\n"
    "  return gone\n"
    "end)\n"
    /* KEYS stream; ARGV group, consumer, heartbeat key prefix, count: the
     * entries of consumers without a heartbeat, up to count, claimed for
     * this consumer as {id, fields, attempt}; such consumers holding
     * nothing are removed */
    "redis.register_function('redlm_reap', function(keys, args)\n"
    "  local n, out = tonumber(args[4]), {}\n"
    "  local ok, cs = pcall(redis.call, 'XINFO', 'CONSUMERS', keys[1], args[1])\n"
    "  if not ok then return out end\n"
    "  for _, c in ipairs(cs) do\n"
    "    c = fields(c)\n"
    "    if c.name ~= args[2] and redis.call('EXISTS', args[3] .. c.name) == 0 then\n"
    "      if c.pending == 0 then\n"
    "        redis.call('XGROUP', 'DELCONSUMER', keys[1], args[1], c.name)\n"
    "      elseif n > 0 then\n"
    "        local p = redis.call('XPENDING', keys[1], args[1], '-', '+', n, c.name)\n"
    "        local cmd, attempt = {'XCLAIM', keys[1], args[1], args[2], '0'}, {}\n"
    "        for _, e in ipairs(p) do cmd[#cmd + 1] = e[1]; attempt[e[1]] = e[4] + 1 end\n"
    "        for _, e in ipairs(redis.call(unpack(cmd))) do\n"
    "          out[#out + 1] = {e[1], e[2], attempt[e[1]]}\n"
    "          n = n - 1\n"
    "        end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  return out\n"
    "end)\n"
    /* KEYS stream; ARGV group, consumer, heartbeat key: a stopping worker's
     * heartbeat goes (others take what it still holds at their next reap),
     * and so does its consumer when it holds nothing */
    "redis.register_function('redlm_release', function(keys, args)\n"
    "  redis.call('DEL', args[3])\n"
    "  local ok, cs = pcall(redis.call, 'XINFO', 'CONSUMERS', keys[1], args[1])\n"
    "  if not ok then return 0 end\n"
    "  for _, c in ipairs(cs) do\n"
    "    c = fields(c)\n"
    "    if c.name == args[2] and c.pending == 0 then\n"
    "      redis.call('XGROUP', 'DELCONSUMER', keys[1], args[1], c.name)\n"
    "    end\n"
    "  end\n"
    "  return 0\n"
    "end)\n"
    /* KEYS stream; ARGV maxlen (0: none): entries every group has read and
     * acknowledged go (below each group's oldest pending and last-delivered
     * ids); maxlen caps the rest */
    "local function before(a, b)\n"
    "  local am, as = a:match('(%d+)-(%d+)')\n"
    "  local bm, bs = b:match('(%d+)-(%d+)')\n"
    "  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)\n"
    "  return am < bm or (am == bm and as < bs)\n"
    "end\n"
    "redis.register_function('redlm_trim', function(keys, args)\n"
    "  local ok, gs = pcall(redis.call, 'XINFO', 'GROUPS', keys[1])\n"
    "  if not ok or #gs == 0 then return 0 end\n"
    "  local min\n"
    "  for _, g in ipairs(gs) do\n"
    "    g = fields(g)\n"
    "    local id = g['last-delivered-id']\n"
    "    if g.pending > 0 then\n"
    "      local s = redis.call('XPENDING', keys[1], g.name)\n"
    "      if s[2] and before(s[2], id) then id = s[2] end\n"
    "    end\n"
    "    if not min or before(id, min) then min = id end\n"
    "  end\n"
    "  local n = redis.call('XTRIM', keys[1], 'MINID', min)\n"
    "  if tonumber(args[1]) > 0 then n = n + redis.call('XTRIM', keys[1], 'MAXLEN', '~', args[1]) end\n"
    "  return n\n"
    "end)\n";

void functions_load(redisAsyncContext *ac, redisCallbackFn *fn, void *priv) {
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", functions_library};
    size_t len[4] = {8, 4, 7, sizeof(functions_library) - 1};
    redisAsyncCommandArgv(ac, fn, priv, 4, argv, len);
}
