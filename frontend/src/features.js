// Which optional endpoints this node serves, read from its OpenAPI document (an open route): once it
// was read, for the life of the tab; a failed read is not kept, the next question asks again.
let doc = null

function load() {
  if (!doc) {
    doc = fetch('/api/v1/openapi.json', { headers: { Accept: 'application/json' } })
      .then((r) => {
        if (!r.ok) throw new Error(`HTTP ${r.status}`)
        return r.json()
      })
      .catch(() => {
        doc = null
        return { paths: {} }
      })
  }
  return doc
}

/** The OpenAPI path item of `/api/v1${path}` ({get, post, ...}) or null when the node lacks it. */
export async function endpoint(path) {
  const d = await load()
  return (d && d.paths && d.paths[`/api/v1${path}`]) || null
}

/** A schema of the document's components (e.g. 'TaskCreate'), or null: the rules the API states. */
export async function schema(name) {
  const d = await load()
  return (d && d.components && d.components.schemas && d.components.schemas[name]) || null
}
