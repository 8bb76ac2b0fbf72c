/* functions.c: the Lua library behind every job write (see functions.h).
 *
 * Job writes go in batches (redlm_batch: one FCALL for a run of queued
 * items, one answer per item), since a function call costs Redis far more
 * than the XADD inside it: each operation names its job by (entry,
 * attempt, id) and is checked against the fence, cached for the rest of the
 * call; EXPIREs run once per reply stream at the end.  The fence is
 * the pair (consumer, delivery count) XPENDING reports for the entry: XCLAIM
 * by anyone else changes the owner and raises the count, and the worker's
 * own idle refresh (XCLAIM JUSTID) changes neither, so it works as a lease
 * token that needs no key of its own. */
#include "worker/redis/functions.h"

#include <string.h>

const char functions_library[] =
    "#!lua name=" FUNCTIONS_LIBRARY "\n"
    "local function fields(t)\n"
    "  local m = {}\n"
    "  for i = 1, #t, 2 do m[t[i]] = t[i + 1] end\n"
    "  return m\n"
    "end\n"
    /* nil when the entry is ours, else why not; seen caches passed checks
     * within one call */
    "local function fence(keys, group, consumer, entry, attempt, seen)\n"
    "  if seen and seen[entry] == attempt then return nil end\n"
    "  local ok, p = pcall(redis.call, 'XPENDING', keys[1], group, entry, entry, 1)\n"
    "  if not ok then return 'group ' .. group .. ' is gone' end\n"
    "  if #p == 0 then return 'entry ' .. entry .. ' is no longer pending' end\n"
    "  if p[1][2] ~= consumer or p[1][4] ~= tonumber(attempt) then\n"
    "    return 'entry ' .. entry .. ' is now held by ' .. p[1][2] .. ' (delivery ' .. p[1][4] .. ')'\n"
    "  end\n"
    "  if seen then seen[entry] = attempt end\n"
    "  return nil\n"
    "end\n"
    /* XCLAIM (Redis 7) drops a pending entry deleted from the stream (XDEL,
     * a producer's MAXLEN, --jobs-maxlen) from the group, and with it the
     * fence of the job running it, which could then never be answered: such
     * an entry is left to its holder (neither its refresh nor redlm_claim
     * takes it); a dead holder's get a dead letter from redlm_reap */
    "local function in_stream(key, entry)\n"
    "  return #redis.call('XRANGE', key, entry, entry) > 0\n"
    "end\n"
    "local function errstr(e) return type(e) == 'table' and e.err or tostring(e) end\n"
    /* KEYS stream, running hash, dead-letter stream: the dead letter of an
     * entry, written by consumer at this attempt (cap: --dead-maxlen), its
     * own fields (not a copy of a copy), then what went wrong.  nil when
     * written, else why not: a dead-letter key of another type, or one an
     * ACL selector lets this user name but not XADD to (one its key
     * patterns leave out refuses the whole FCALL, NOPERM).  Every caller
     * then leaves the entry pending rather than acknowledge a job whose
     * failure is written nowhere. */
    "local function dead_letter(keys, cap, consumer, entry, attempt, err)\n"
    "  local cmd = {'XADD', keys[3]}\n"
    "  if tonumber(cap) > 0 then\n"
    "    cmd[#cmd + 1] = 'MAXLEN'; cmd[#cmd + 1] = '~'; cmd[#cmd + 1] = cap\n"
    "  end\n"
    "  cmd[#cmd + 1] = '*'\n"
    "  local e = redis.call('XRANGE', keys[1], entry, entry)\n"
    "  if #e > 0 then\n"
    "    local f = e[1][2]\n"
    "    for k = 1, math.min(#f, 2000) do cmd[#cmd + 1] = f[k] end\n"
    "  end\n"
    "  for _, v in ipairs({'error', err, 'stream', keys[1], 'entry', entry, 'consumer', consumer,\n"
    "                      'attempt', tostring(attempt)}) do cmd[#cmd + 1] = v end\n"
    "  local ok, e = pcall(redis.call, unpack(cmd))\n"
    "  if not ok then return 'the dead-letter stream ' .. keys[3] .. ' " FUNCTIONS_DEAD_REFUSED "' .. errstr(e) end\n"
    "  return nil\n"
    "end\n"
    /* Job operations: a = redlm_batch's ARGV (group, consumer, ttl,
     * dead-letter cap, ...), i = where the operation starts: a[i] op,
     * a[i+1] entry, a[i+2] attempt, a[i+3] job id, then its arguments. */
    "local function job_dead_letter(keys, a, i, err)\n"
    "  return dead_letter(keys, a[4], a[2], a[i + 1], a[i + 2], err)\n"
    "end\n"
    /* the running hash is read before the XACK: a script's writes stay
     * when a later command fails (a hash key of another type), and an
     * acknowledged job whose answer failed would be lost */
    "local function ack(keys, a, i, c)\n"
    "  local mine = a[i + 3] ~= '' and redis.call('HGET', keys[2], a[i + 3]) == a[i + 1]\n"
    "  redis.call('XACK', keys[1], a[1], a[i + 1])\n"
    "  c.seen[a[i + 1]] = nil\n"
    "  if mine then redis.call('HDEL', keys[2], a[i + 3]) end\n"
    "end\n"
    /* op name -> {number of its own arguments, function} */
    "local ops = {}\n"
    /* the job may run unless another pending entry runs its id */
    "ops.start = {0, function(keys, a, i, c)\n"
    "  local id, entry = a[i + 3], a[i + 1]\n"
    "  if id == '' then return 'OK' end\n"
    "  local cur = redis.call('HGET', keys[2], id)\n"
    "  if cur and cur ~= entry and #redis.call('XPENDING', keys[1], a[1], cur, cur, 1) > 0 then\n"
    "    return 'DUPLICATE ' .. cur\n"
    "  end\n"
    "  redis.call('HSET', keys[2], id, entry)\n"
    "  return 'OK'\n"
    "end}\n"
    /* reply stream, field, payload: a key holding anything but a stream, or
     * one this user may not write (an ACL key pattern), is left alone: the
     * job's dead letter and XACK are written instead, since a job that went
     * on to its XACK would be acknowledged with no answer anywhere.  The
     * key's EXPIRE comes only after an XADD.  When the dead letter is
     * refused too, the entry stays pending, and nothing more of this
     * attempt may acknowledge it (its XACK may be on its way already, in a
     * later call): its delivery count goes up by one, which fences the
     * attempt out as another worker's claim would.  An entry no longer in
     * the stream cannot be fenced so (XCLAIM would drop it from the group);
     * its attempt's own XACK, if it comes, ends it. */
    "local function refuse(keys, a, i, c, msg)\n"
    "  local why = job_dead_letter(keys, a, i, cjson.encode({code = 'reply_refused', message = msg}))\n"
    "  if not why then\n"
    "    ack(keys, a, i, c)\n"
    "    return redis.error_reply('REFUSED ' .. msg)\n"
    "  end\n"
    "  local count = tonumber(a[i + 2]) + 1\n"
    "  if in_stream(keys[1], a[i + 1]) then\n"
    "    redis.call('XCLAIM', keys[1], a[1], a[2], '0', a[i + 1], 'RETRYCOUNT', count, 'JUSTID')\n"
    "  end\n"
    "  c.seen[a[i + 1]] = nil\n"
    "  return redis.error_reply('HELD ' .. msg .. ', and ' .. why .. '; entry ' .. a[i + 1] .. ' is left pending, '\n"
    "    .. 'not acknowledged (its delivery count raised to ' .. count .. ', so that nothing more of this attempt '\n"
    "    .. 'acknowledges it)')\n"
    "end\n"
    /* an error answer that reads once: Redis 7.0's pcall hands a command's
     * error back as its text, code and all ("ERR The user ...", "WRONGTYPE
     * ..."); only a Lua runtime error comes without a code */
    "local function error_answer(e)\n"
    "  local s = errstr(e)\n"
    "  if not s:match('^%u+ ') then s = 'ERR ' .. s end\n"
    "  return redis.error_reply(s)\n"
    "end\n"
    "ops.reply = {3, function(keys, a, i, c)\n"
    "  local key = a[i + 4]\n"
    "  if not c.streams[key] then\n"
    "    local ok, t = pcall(redis.call, 'TYPE', key)\n"
    "    if not ok then return refuse(keys, a, i, c, 'reply key ' .. key .. ' cannot be read: ' .. errstr(t)) end\n"
    "    t = t['ok']\n"
    "    if (t ~= 'none' and t ~= 'stream') or key == keys[1] or key == keys[3] then\n"
    "      return refuse(keys, a, i, c, 'reply key ' .. key .. ' is not a reply stream (it holds a ' .. t .. ')')\n"
    "    end\n"
    "  end\n"
    "  local ok, e = pcall(redis.call, 'XADD', key, '*', a[i + 5], a[i + 6])\n"
    "  if not ok then return refuse(keys, a, i, c, 'reply key ' .. key .. ' refused the event: ' .. errstr(e)) end\n"
    "  c.streams[key] = true\n"
    "  return 1\n"
    "end}\n"
    /* the error as JSON: the job's dead letter and its XACK, in one call, so
     * that a refused dead letter leaves the entry pending */
    "ops.fail = {1, function(keys, a, i, c)\n"
    "  local why = job_dead_letter(keys, a, i, a[i + 4])\n"
    "  if why then\n"
    "    return redis.error_reply('HELD ' .. why .. '; entry ' .. a[i + 1] .. ' is left pending, not acknowledged')\n"
    "  end\n"
    "  ack(keys, a, i, c)\n"
    "  return 1\n"
    "end}\n"
    "ops.ack = {0, function(keys, a, i, c) ack(keys, a, i, c); return 1 end}\n"
    /* KEYS stream, running hash, dead-letter stream; ARGV group, consumer,
     * reply ttl, dead-letter cap, then operations: one answer each */
    "redis.register_function('" FUNCTIONS_FN("redlm_batch") "', function(keys, a)\n"
    "  local c = {seen = {}, streams = {}}\n"
    "  local out, i = {}, 5\n"
    "  while i <= #a do\n"
    "    local op = ops[a[i]]\n"
    "    if not op then return redis.error_reply('ERR redlm_batch: unknown operation ' .. a[i]) end\n"
    "    local why = fence(keys, a[1], a[2], a[i + 1], a[i + 2], c.seen)\n"
    "    if why then\n"
    "      out[#out + 1] = redis.error_reply('LOST ' .. why)\n"
    "    else\n"
    "      local ok, r = pcall(op[2], keys, a, i, c)\n"
    "      if ok then out[#out + 1] = r else out[#out + 1] = error_answer(r) end\n"
    "    end\n"
    "    i = i + 4 + op[1]\n"
    "  end\n"
    "  if tonumber(a[3]) > 0 then\n"
    "    for k in pairs(c.streams) do redis.call('EXPIRE', k, a[3]) end\n"
    "  end\n"
    "  return out\n"
    "end)\n"
    /* KEYS stream; ARGV group, consumer, then (entry, attempt) pairs: the
     * idle time of those still ours (and in the stream) is reset, the
     * others are returned */
    "redis.register_function('" FUNCTIONS_FN("redlm_refresh") "', function(keys, args)\n"
    "  local gone, mine = {}, {'XCLAIM', keys[1], args[1], args[2], '0'}\n"
    "  for i = 3, #args - 1, 2 do\n"
    "    local why = fence(keys, args[1], args[2], args[i], args[i + 1])\n"
    "    if why then gone[#gone + 1] = args[i]\n"
    "    elseif in_stream(keys[1], args[i]) then mine[#mine + 1] = args[i] end\n"
    "  end\n"
    "  if #mine > 5 then\n"
    "    mine[#mine + 1] = 'JUSTID'\n"
    "    redis.call(unpack(mine))\n"
    "  end\n"
    "  return gone\n"
    "end)\n"
    /* KEYS stream; ARGV group, consumer, min idle time, entries: XCLAIM of
     * those still in the stream (a deleted one's holder, if alive, still
     * runs it; a dead holder's are reaped) */
    "redis.register_function('" FUNCTIONS_FN("redlm_claim") "', function(keys, args)\n"
    "  local cmd = {'XCLAIM', keys[1], args[1], args[2], args[3]}\n"
    "  for i = 4, #args do\n"
    "    if in_stream(keys[1], args[i]) then cmd[#cmd + 1] = args[i] end\n"
    "  end\n"
    "  if #cmd == 5 then return {} end\n"
    "  return redis.call(unpack(cmd))\n"
    "end)\n"
    /* An entry deleted from the stream while a consumer that stopped
     * without answering it held it: XCLAIM would drop it from the group and
     * the producer would never hear of it, so it gets a dead letter
     * (entry_deleted, no fields: they went with it) and its XACK.  The job's
     * id is left only in the running hash (ids: entry -> id), and only if
     * it started; its reply stream is not left anywhere (reply_to went with
     * the entry), so no error event can be written.  Returns the message
     * (HELD first when the dead letter is refused). */
    "local function reap_deleted(keys, args, ids, holder, p)\n"
    "  local entry, id = p[1], ids[p[1]]\n"
    "  local msg = 'entry ' .. entry .. ' was deleted from ' .. keys[1] .. ' (XDEL, XADD MAXLEN or --jobs-maxlen) '\n"
    "    .. 'while consumer ' .. holder .. ', which stopped without answering it, held it (delivery ' .. p[4]\n"
    "    .. '): nothing is left to run; '\n"
    "  if id then\n"
    "    msg = msg .. 'it ran job \\'' .. id .. '\\' (as ' .. keys[2] .. ' says), whose reply stream is not known '\n"
    "      .. '(reply_to went with the entry), so no error event was written'\n"
    "  else\n"
    "    msg = msg .. 'its job id and reply stream went with it'\n"
    "  end\n"
    "  local why = dead_letter(keys, args[6], args[2], entry, p[4], cjson.encode({code = 'entry_deleted', message = msg}))\n"
    "  if why then return 'HELD ' .. msg .. '; ' .. why .. ': the entry is left pending, not acknowledged' end\n"
    "  redis.call('XACK', keys[1], args[1], entry)\n"
    "  if id then redis.call('HDEL', keys[2], id) end\n"
    "  return msg\n"
    "end\n"
    "local function running_ids(keys)\n"
    "  local m, h = {}, redis.call('HGETALL', keys[2])\n"
    "  for i = 1, #h, 2 do m[h[i + 1]] = h[i] end\n"
    "  return m\n"
    "end\n"
    /* KEYS stream, running hash, dead-letter stream; ARGV group, consumer,
     * heartbeat key prefix, count, own, dead-letter cap: the entries of
     * consumers without a heartbeat, up to count, claimed for this consumer
     * as {id, fields, attempt}, and those deleted from the stream meanwhile
     * as {id, message} (dead-lettered and acknowledged); such consumers
     * holding nothing are removed.  own = 1 (a worker's first look, holding
     * nothing yet, before the reconnect grace): its own name's entries
     * only, a previous process's under the same name (a restart with the
     * same --consumer, or host:pid in a container, where the pid is 1
     * again) */
    "redis.register_function('" FUNCTIONS_FN("redlm_reap") "', function(keys, args)\n"
    "  local n, out, ids = tonumber(args[4]), {}, nil\n"
    "  local ok, cs = pcall(redis.call, 'XINFO', 'CONSUMERS', keys[1], args[1])\n"
    "  if not ok then return out end\n"
    "  for _, c in ipairs(cs) do\n"
    "    c = fields(c)\n"
    "    local own = c.name == args[2]\n"
    "    if (own and args[5] == '1') or (not own and args[5] ~= '1' and redis.call('EXISTS', args[3] .. c.name) == 0) then\n"
    "      if c.pending == 0 then\n"
    "        if not own then redis.call('XGROUP', 'DELCONSUMER', keys[1], args[1], c.name) end\n"
    "      elseif n > 0 then\n"
    "        local p = redis.call('XPENDING', keys[1], args[1], '-', '+', n, c.name)\n"
    "        local cmd, attempt = {'XCLAIM', keys[1], args[1], args[2], '0'}, {}\n"
    "        for _, e in ipairs(p) do\n"
    "          if in_stream(keys[1], e[1]) then\n"
    "            cmd[#cmd + 1] = e[1]; attempt[e[1]] = e[4] + 1\n"
    "          else\n"
    "            ids = ids or running_ids(keys)\n"
    "            out[#out + 1] = {e[1], reap_deleted(keys, args, ids, c.name, e)}\n"
    "          end\n"
    "        end\n"
    "        if #cmd > 5 then\n"
    "          for _, e in ipairs(redis.call(unpack(cmd))) do\n"
    "            out[#out + 1] = {e[1], e[2], attempt[e[1]]}\n"
    "            n = n - 1\n"
    "          end\n"
    "        end\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  return out\n"
    "end)\n"
    /* KEYS stream; ARGV group, consumer, heartbeat key: a stopping worker's
     * heartbeat goes (others take what it still holds at their next reap),
     * and so does its consumer when it holds nothing */
    "redis.register_function('" FUNCTIONS_FN("redlm_release") "', function(keys, args)\n"
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
    /* KEYS: any of the worker's keys; ARGV: the type each must have if it
     * exists (stream, hash), none for a key not checked.  Redis checks an
     * FCALL's keys against the user's ACL key patterns before running it,
     * so a NOPERM answer here names a key this user may not write (the
     * answer to a redlm_batch names none of its three); a WRONGTYPE one
     * names a key another program (or a stale run) left holding another
     * type, which every job's start or acknowledgement would fail on */
    "redis.register_function('" FUNCTIONS_FN("redlm_keys") "', function(keys, args)\n"
    "  for i, want in ipairs(args) do\n"
    "    local t = redis.call('TYPE', keys[i])['ok']\n"
    "    if t ~= 'none' and t ~= want then\n"
    "      return redis.error_reply('WRONGTYPE ' .. keys[i] .. ' holds a ' .. t .. ' where this pool keeps a ' .. want\n"
    "        .. ' (another program uses the name, or it is stale): DEL it, or give the pool other keys '\n"
    "        .. '(--stream, --dead)')\n"
    "    end\n"
    "  end\n"
    "  return 'OK'\n"
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
    "redis.register_function('" FUNCTIONS_FN("redlm_trim") "', function(keys, args)\n"
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

int functions_refused_for_all(const char *why) {
    return !strncmp(why, FUNCTIONS_WRONGTYPE " ", 10) ||
           strstr(why, FUNCTIONS_DEAD_REFUSED FUNCTIONS_WRONGTYPE " ") != NULL ||
           strstr(why, "The user executing the script can't ") != NULL;
}

void functions_load(redisAsyncContext *ac, redisCallbackFn *fn, void *priv) {
    const char *argv[4] = {"FUNCTION", "LOAD", "REPLACE", functions_library};
    size_t len[4] = {8, 4, 7, sizeof(functions_library) - 1};
    redisAsyncCommandArgv(ac, fn, priv, 4, argv, len);
}
