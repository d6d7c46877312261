// Imported first by main.js: takes the handed-over token out of the URL fragment before the router
// module reads the location (it would keep the fragment in its own state and put it back).
import { consumeHandoff } from './cluster.js'

consumeHandoff()
import './theme.js'
