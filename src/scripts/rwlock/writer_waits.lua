-- writer_waits: a writer waits behind readers.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the waiting-writer flag
-- ARGV[1]  the writer's token
-- ARGV[2]  how long (ms) the flag lasts
--
-- While readers hold the lock key (it holds READERS_MARK), sets the flag to
-- the writer's token and answers 1; otherwise writes nothing and answers
-- 0.
if redis.call("GET", KEYS[1]) ~= READERS_MARK then
    return 0
end
redis.call("SET", KEYS[2], ARGV[1], "PX", ARGV[2])
return 1
